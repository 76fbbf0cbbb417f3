package sim

// event is a worker's push arriving at the gate.
type event struct {
	at     int64
	seq    uint64 // insertion order: breaks ties in at deterministically
	worker int32
}

// eventQueue is a 4-ary min-heap on (at, seq): half the levels of a binary
// heap, and a node's children share a cache line or two. Typed, so no
// interface boxing per event. (at, seq) is unique, so the order of pops
// does not depend on the heap's shape.
type eventQueue struct {
	h   []event
	seq uint64
}

func (q *eventQueue) len() int { return len(q.h) }

func (q *eventQueue) less(i, j int) bool {
	a, b := &q.h[i], &q.h[j]
	return a.at < b.at || (a.at == b.at && a.seq < b.seq)
}

func (q *eventQueue) push(e event) {
	e.seq = q.seq
	q.seq++
	q.insert(e)
}

// insert queues e with the seq it has.
func (q *eventQueue) insert(e event) {
	q.h = append(q.h, e)
	for i := len(q.h) - 1; i > 0; {
		p := (i - 1) / 4
		if !q.less(i, p) {
			break
		}
		q.h[i], q.h[p] = q.h[p], q.h[i]
		i = p
	}
}

// top is the earliest event; the queue must not be empty.
func (q *eventQueue) top() event { return q.h[0] }

// pop removes and returns the earliest event.
func (q *eventQueue) pop() event {
	top := q.h[0]
	last := len(q.h) - 1
	q.h[0] = q.h[last]
	q.h = q.h[:last]
	q.down(0)
	return top
}

// replaceTop replaces the earliest event by e: a pop and a push of e in one
// pass. A new event is usually among the latest, so the hole left at the
// top goes down to a leaf along the earliest children first, and e then
// climbs from there (bottom-up heap replacement: one compare a level
// fewer than sifting e down).
func (q *eventQueue) replaceTop(e event) {
	e.seq = q.seq
	q.seq++
	h, n, i := q.h, len(q.h), 0
	for {
		c := 4*i + 1
		if c >= n {
			break
		}
		m := c
		for j := c + 1; j <= c+3 && j < n; j++ {
			if h[j].at < h[m].at || (h[j].at == h[m].at && h[j].seq < h[m].seq) {
				m = j
			}
		}
		h[i] = h[m]
		i = m
	}
	h[i] = e
	for i > 0 {
		p := (i - 1) / 4
		if !q.less(i, p) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *eventQueue) down(i int) {
	n := len(q.h)
	for {
		m := i
		for c := 4*i + 1; c <= 4*i+4 && c < n; c++ {
			if q.less(c, m) {
				m = c
			}
		}
		if m == i {
			return
		}
		q.h[i], q.h[m] = q.h[m], q.h[i]
		i = m
	}
}
