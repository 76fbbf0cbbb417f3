package clock

import "fmt"

// WorkerID names a worker: the mesh node id of the node that trains.
type WorkerID string

// Table is a vector clock table: one iteration counter per live worker.
//
// Workers are interned: each live worker holds a dense index (a slot of
// the slices below), found by one map lookup on its id; everything after
// that lookup is slice indexing and pointers. A removed worker's index is
// reused by the next Add. Indices are internal and never decide anything:
// the order of indices is not the order of ids.
//
// The workers are kept in buckets by clock, and the non-empty buckets in a
// list sorted by clock, so Min and Max are the list's ends. Each worker
// points at its bucket, so Advance (to the bucket at clock+1, the next one
// or a new one) and Remove are O(1) with no lookup by clock. Add at the min
// or above the max is O(1); elsewhere it walks the list (O(distinct
// clocks)). Emptied buckets are kept for reuse, so a steady run allocates
// nothing. The order of workers inside a bucket depends on history;
// nothing that reads it may depend on that order (see EachAt).
type Table struct {
	index map[WorkerID]int32
	ids   []WorkerID // by index; "" for a free index
	bk    []*bucket  // by index: the bucket of its clock; nil for a free index
	pos   []int32    // by index: position in bk.at
	free  []int32    // free indices, reused last in first out
	// head and tail are the buckets of the min and max clock, nil when the
	// table is empty.
	head, tail *bucket
	spare      []*bucket
	// min and max are kept apart from head and tail so that an empty table
	// reads 0.
	min, max int64
}

// bucket holds the workers whose clock is clock. wait is for the Gate: the
// workers of the bucket whose push at clock−1 is held.
type bucket struct {
	clock      int64
	at         []int32
	wait       []int32
	prev, next *bucket
}

// NewTable returns an empty table.
func NewTable() *Table {
	return &Table{index: map[WorkerID]int32{}}
}

// Len is the number of workers.
func (t *Table) Len() int { return len(t.index) }

// Min is the smallest clock, 0 for an empty table.
func (t *Table) Min() int64 { return t.min }

// Max is the largest clock, 0 for an empty table.
func (t *Table) Max() int64 { return t.max }

// Spread is Max − Min.
func (t *Table) Spread() int64 { return t.max - t.min }

// Clock returns w's clock.
func (t *Table) Clock(w WorkerID) (int64, bool) {
	i, ok := t.index[w]
	if !ok {
		return 0, false
	}
	return t.bk[i].clock, true
}

// CountAt is the number of workers whose clock is c.
func (t *Table) CountAt(c int64) int { return len(t.at(c)) }

// EachAt calls f for every worker whose clock is c, in an unspecified order:
// callers must combine the results order-independently.
func (t *Table) EachAt(c int64, f func(WorkerID)) {
	for _, i := range t.at(c) {
		f(t.ids[i])
	}
}

// Add puts w in the table at clock c.
func (t *Table) Add(w WorkerID, c int64) error {
	_, err := t.add(w, c)
	return err
}

// Remove takes w out of the table.
func (t *Table) Remove(w WorkerID) error {
	i, ok := t.index[w]
	if !ok {
		return &UnknownWorkerError{Worker: w}
	}
	t.remove(i)
	return nil
}

// Advance increments w's clock and returns the new value.
func (t *Table) Advance(w WorkerID) (int64, error) {
	i, ok := t.index[w]
	if !ok {
		return 0, &UnknownWorkerError{Worker: w}
	}
	return t.advance(i), nil
}

// lookup returns w's index.
func (t *Table) lookup(w WorkerID) (int32, bool) {
	i, ok := t.index[w]
	return i, ok
}

// clock is index i's clock.
func (t *Table) clock(i int32) int64 { return t.bk[i].clock }

// find returns the bucket at clock c, nil if none. O(1) at the min,
// otherwise a walk of the list.
func (t *Table) find(c int64) *bucket {
	for b := t.head; b != nil && b.clock <= c; b = b.next {
		if b.clock == c {
			return b
		}
	}
	return nil
}

// at returns the indices whose clock is c; the caller must not keep or
// change the slice.
func (t *Table) at(c int64) []int32 {
	if b := t.find(c); b != nil {
		return b.at
	}
	return nil
}

// add puts w at clock c and returns its index.
func (t *Table) add(w WorkerID, c int64) (int32, error) {
	if w == "" {
		return 0, ErrBadWorkerID
	}
	if _, ok := t.index[w]; ok {
		return 0, fmt.Errorf("%w: %q", ErrWorkerExists, w)
	}
	if c < 0 {
		return 0, fmt.Errorf("clock: negative clock %d for worker %q", c, w)
	}
	var i int32
	if n := len(t.free); n > 0 {
		i = t.free[n-1]
		t.free = t.free[:n-1]
		t.ids[i] = w
	} else {
		i = int32(len(t.ids))
		t.ids = append(t.ids, w)
		t.bk = append(t.bk, nil)
		t.pos = append(t.pos, 0)
	}
	t.index[w] = i
	// Find the last bucket at or below c (nil: c is below the min).
	var after *bucket
	switch {
	case t.tail != nil && t.tail.clock <= c:
		after = t.tail
	case t.head != nil && t.head.clock <= c:
		after = t.head
		for after.next != nil && after.next.clock <= c {
			after = after.next
		}
	}
	b := after
	if b == nil || b.clock != c {
		b = t.insertAfter(after, c)
	}
	t.put(i, b)
	return i, nil
}

// remove takes index i out of the table and frees it.
func (t *Table) remove(i int32) {
	t.take(i)
	delete(t.index, t.ids[i])
	t.ids[i], t.bk[i] = "", nil
	t.free = append(t.free, i)
}

// advance increments i's clock and returns the new value.
func (t *Table) advance(i int32) int64 {
	b := t.bk[i]
	c := b.clock + 1
	nb := b.next
	if nb == nil || nb.clock != c {
		nb = t.insertAfter(b, c)
	}
	t.take(i)
	t.put(i, nb)
	return c
}

// insertAfter links a new empty bucket at clock c after b (at the head
// when b is nil) and returns it. The caller fills it at once.
func (t *Table) insertAfter(b *bucket, c int64) *bucket {
	var nb *bucket
	if n := len(t.spare); n > 0 {
		nb = t.spare[n-1]
		t.spare = t.spare[:n-1]
	} else {
		nb = &bucket{}
	}
	nb.clock, nb.prev = c, b
	if b == nil {
		nb.next, t.head = t.head, nb
	} else {
		nb.next, b.next = b.next, nb
	}
	if nb.next == nil {
		t.tail = nb
	} else {
		nb.next.prev = nb
	}
	t.min, t.max = t.head.clock, t.tail.clock
	return nb
}

func (t *Table) put(i int32, b *bucket) {
	t.bk[i] = b
	t.pos[i] = int32(len(b.at))
	b.at = append(b.at, i)
}

// take removes i from its bucket, unlinking the bucket if it empties.
func (t *Table) take(i int32) {
	b := t.bk[i]
	last := int32(len(b.at) - 1)
	if p := t.pos[i]; p != last {
		moved := b.at[last]
		b.at[p] = moved
		t.pos[moved] = p
	}
	b.at = b.at[:last]
	if last > 0 {
		return
	}
	if b.prev == nil {
		t.head = b.next
	} else {
		b.prev.next = b.next
	}
	if b.next == nil {
		t.tail = b.prev
	} else {
		b.next.prev = b.prev
	}
	b.prev, b.next, b.wait = nil, nil, b.wait[:0]
	t.spare = append(t.spare, b)
	if t.head == nil {
		t.min, t.max = 0, 0
	} else {
		t.min, t.max = t.head.clock, t.tail.clock
	}
}
