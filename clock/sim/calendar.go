package sim

import (
	"math"
	"math/bits"
	"slices"
)

// calendarQueue is a priority queue of events on (at, seq), like
// eventQueue, built for the simulator's traffic: every event is at or after
// the current one, and most lie within a few mean compute times of it.
//
// Time is cut into slots of 2^shift ns; a ring of 2^k buckets holds the
// events of the slots [cur, cur+2^k) (the window), one slot a bucket, each
// bucket sorted by (at, seq); a bitmap marks the non-empty buckets, so the
// next event is the head of the first marked bucket at or after cur (a
// word scan). Events beyond the window wait in a heap (far) and enter their
// bucket as soon as the window reaches their slot, before anything else can
// be queued there; so every bucket receives its events in seq order among
// equal at, as the heap would order them. With slots about one mean gap
// between events wide, a push or pop touches one or two short buckets: no
// compare chain of a heap (whose mispredicted branches were the heap's
// cost), no allocation once the buckets have grown.
//
// The order of pops is exactly the heap's: (at, seq) is unique and both
// pop its minimum. TestCalendarQueueMatchesHeap checks that.
type calendarQueue struct {
	shift uint
	mask  int64 // 2^k − 1
	cur   int64 // the window's first slot; every queued event is at or after it
	// Bucket b is a list of nodes sorted by (at, seq), from head[b] to
	// tail[b]; −1 when empty. The nodes are a pool reused last in first
	// out, so the live ones stay few and hot in cache.
	head, tail []int32
	nodes      []calNode
	free       []int32
	occ        []uint64 // bit b set: bucket b is not empty
	nring      int      // events in the ring
	far        eventQueue
	seq        uint64
}

type calNode struct {
	e    event
	next int32
}

// maxCalendarBuckets bounds the ring (and its memory: ~40 bytes a bucket).
const maxCalendarBuckets = 1 << 16

// newCalendarQueue sizes the queue for events spaced about gap ns apart
// and at most about horizon ns after the current one (later events are
// correct, only slower: they wait in the far heap).
func newCalendarQueue(gap, horizon float64) *calendarQueue {
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
		occ:   make([]uint64, n/64),
	}
}

func (q *calendarQueue) len() int { return q.nring + q.far.len() }

func eventBefore(a, b *event) bool { return a.at < b.at || (a.at == b.at && a.seq < b.seq) }

// push queues e, numbering it after every event queued before.
func (q *calendarQueue) push(e event) {
	e.seq = q.seq
	q.seq++
	slot := max(e.at>>q.shift, q.cur)
	if slot-q.cur > q.mask {
		q.far.insert(e)
		return
	}
	q.put(slot&q.mask, e)
}

// put inserts e into bucket b in (at, seq) order: at the tail, where a
// later event goes, or after the last node before it.
func (q *calendarQueue) put(b int64, e event) {
	var n int32
	if k := len(q.free); k > 0 {
		n = q.free[k-1]
		q.free = q.free[:k-1]
	} else {
		n = int32(len(q.nodes))
		q.nodes = append(q.nodes, calNode{})
	}
	q.nodes[n] = calNode{e: e, next: -1}
	q.nring++
	h := q.head[b]
	switch {
	case h < 0:
		q.head[b], q.tail[b] = n, n
		q.occ[b>>6] |= 1 << (b & 63)
	case !eventBefore(&e, &q.nodes[q.tail[b]].e):
		q.nodes[q.tail[b]].next = n
		q.tail[b] = n
	case eventBefore(&e, &q.nodes[h].e):
		q.nodes[n].next = h
		q.head[b] = n
	default:
		p := h
		for nx := q.nodes[p].next; !eventBefore(&e, &q.nodes[nx].e); nx = q.nodes[p].next {
			p = nx
		}
		q.nodes[n].next = q.nodes[p].next
		q.nodes[p].next = n
	}
}

// top is the earliest event; the queue must not be empty. It moves the
// window up to the event's slot.
func (q *calendarQueue) top() event {
	return q.nodes[q.head[q.first()]].e
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
	nw := int64(len(q.occ))
	for {
		w = (w + 1) % nw
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
		q.put(max(e.at>>q.shift, q.cur)&q.mask, e)
	}
}

// pop removes the earliest event.
func (q *calendarQueue) pop() {
	b := q.first()
	n := q.head[b]
	q.head[b] = q.nodes[n].next
	q.free = append(q.free, n)
	q.nring--
	if q.head[b] < 0 {
		q.occ[b>>6] &^= 1 << (b & 63)
	}
}

// replaceTop pops the earliest event and pushes e.
func (q *calendarQueue) replaceTop(e event) {
	q.pop()
	q.push(e)
}
