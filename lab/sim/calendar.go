package sim

import (
	"math"
	"math/bits"
	"slices"
)

// calendarQueue is a priority queue of events on (at, seq), like
// eventQueue, built for the simulator's traffic: each worker has at most
// one event queued, every event is at or after the current one, and most
// lie within a few mean compute times of it.
//
// Time is cut into slots of 2^shift ns; a ring of 2^k buckets holds the
// events of the slots [cur, cur+2^k) (the window), one slot a bucket, each
// bucket a list sorted by at, equal times in the order queued; a bitmap
// marks the non-empty buckets, so the next event is the head of the first
// marked bucket at or after cur (a word scan). The lists are linked through
// per-worker arrays (a worker is its own list node), so the whole ring is a
// few small arrays. Events beyond the window wait in a heap on (at, seq)
// (far) and enter their bucket as soon as the window reaches their slot.
// That bucket is then empty (its previous slot is behind the window), and
// anything queued there later was queued after them; so in every bucket the
// order of equal times is the order of seq, and the pops are exactly the
// heap's. With slots about one mean gap between events wide, a push or pop
// touches one or two short lists: no compare chain of a heap (whose
// mispredicted branches were most of its cost), no allocation.
// TestCalendarQueueMatchesHeap checks the order against eventQueue.
type calendarQueue struct {
	shift uint
	mask  int64 // 2^k − 1
	cur   int64 // the window's first slot; every queued event is at or after it
	// Bucket b is the list head[b] → next[·] → … → tail[b] of workers;
	// −1 when empty.
	head, tail []int32
	at         []int64  // by worker: the time of its queued event
	next       []int32  // by worker: the next in its bucket's list, −1 at the end
	occ        []uint64 // bit b set: bucket b is not empty
	nring      int      // events in the ring
	far        eventQueue
	seq        uint64
}

// maxCalendarBuckets bounds the ring (8 bytes a bucket).
const maxCalendarBuckets = 1 << 16

// newCalendarQueue sizes the queue for workers 0..workers−1 whose events
// are spaced about gap ns apart and at most about horizon ns after the
// current one (later events are correct, only slower: they wait in the far
// heap).
func newCalendarQueue(workers int, gap, horizon float64) *calendarQueue {
	shift := uint(0)
	if gap >= 2 {
		shift = uint(min(math.Floor(math.Log2(gap)), 40))
	}
	n := 64
	for n < maxCalendarBuckets && float64(n)*math.Ldexp(1, int(shift)) < horizon {
		n *= 2
	}
	return &calendarQueue{
		shift: shift,
		mask:  int64(n - 1),
		head:  slices.Repeat([]int32{-1}, n),
		tail:  make([]int32, n),
		at:    make([]int64, workers),
		next:  make([]int32, workers),
		occ:   make([]uint64, n/64),
	}
}

func (q *calendarQueue) len() int { return q.nring + q.far.len() }

// push queues e, numbering it after every event queued before. Its worker
// must have no event queued.
func (q *calendarQueue) push(e event) {
	e.seq = q.seq
	q.seq++
	slot := max(e.at>>q.shift, q.cur)
	if slot-q.cur > q.mask {
		q.far.insert(e)
		return
	}
	q.put(slot&q.mask, e.worker, e.at)
}

// put appends worker w's event at t to bucket b after every event at or
// before t: at the tail, where a later event goes, or by a walk.
func (q *calendarQueue) put(b int64, w int32, t int64) {
	q.at[w] = t
	q.next[w] = -1
	q.nring++
	h := q.head[b]
	switch {
	case h < 0:
		q.head[b], q.tail[b] = w, w
		q.occ[b>>6] |= 1 << (b & 63)
	case q.at[q.tail[b]] <= t:
		q.next[q.tail[b]] = w
		q.tail[b] = w
	case t < q.at[h]:
		q.next[w] = h
		q.head[b] = w
	default:
		p := h
		for q.at[q.next[p]] <= t {
			p = q.next[p]
		}
		q.next[w] = q.next[p]
		q.next[p] = w
	}
}

// top is the earliest event (its seq is not kept); the queue must not be
// empty. It moves the window up to the event's slot.
func (q *calendarQueue) top() event {
	w := q.head[q.first()]
	return event{at: q.at[w], worker: w}
}

// first moves the window to the first non-empty slot and returns its
// bucket.
func (q *calendarQueue) first() int64 {
	if q.nring == 0 {
		q.cur = q.far.h[0].at >> q.shift
		q.admit()
	}
	p := q.cur & q.mask
	w := p >> 6
	word := q.occ[w] >> (p & 63)
	if word != 0 {
		d := int64(bits.TrailingZeros64(word))
		if d > 0 {
			q.cur += d
			q.admit()
		}
		return p + d
	}
	// Scan the following words, wrapping around the ring.
	d := 64 - (p & 63)
	last := int64(len(q.occ) - 1)
	for {
		if w == last {
			w = 0
		} else {
			w++
		}
		if word = q.occ[w]; word != 0 {
			break
		}
		d += 64
	}
	d += int64(bits.TrailingZeros64(word))
	q.cur += d
	q.admit()
	return (p + d) & q.mask
}

// admit moves the far events whose slot has entered the window into the
// ring, in (at, seq) order.
func (q *calendarQueue) admit() {
	for q.far.len() > 0 && q.far.h[0].at>>q.shift-q.cur <= q.mask {
		e := q.far.pop()
		q.put(max(e.at>>q.shift, q.cur)&q.mask, e.worker, e.at)
	}
}

// pop removes and returns the earliest event (its seq is not kept); the
// queue must not be empty.
func (q *calendarQueue) pop() event {
	b := q.first()
	w := q.head[b]
	nx := q.next[w]
	q.head[b] = nx
	q.nring--
	if nx < 0 {
		q.occ[b>>6] &^= 1 << (b & 63)
	}
	return event{at: q.at[w], worker: w}
}
