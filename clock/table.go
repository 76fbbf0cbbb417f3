package clock

import "fmt"

// WorkerID names a worker: the mesh node id of the node that trains.
type WorkerID string

// Table is a vector clock table: one iteration counter per live worker.
//
// Workers are interned: each live worker holds a dense index (a slot of
// the slices below), found by one map lookup on its id; everything after
// that lookup is slice indexing. A removed worker's index is reused by the
// next Add. Indices are internal and never decide anything: the order of
// indices is not the order of ids.
//
// Min and Max are O(1): workers are kept in buckets by clock. Advance is
// O(1). Remove is O(1) unless it empties the bucket at the min (or max), in
// which case the next non-empty clock is searched (O(spread)). Add is O(1).
// The order of workers inside a bucket depends on history; nothing that
// reads it may depend on that order (see EachAt).
type Table struct {
	index map[WorkerID]int32
	ids   []WorkerID // by index; "" for a free index
	clock []int64    // by index
	pos   []int32    // by index: position in buckets[clock]
	free  []int32    // free indices, reused last in first out
	// buckets[c] holds the indices whose clock is c. Emptied buckets go to
	// spare and are reused, so a steady run allocates nothing.
	buckets  map[int64]*bucket
	spare    []*bucket
	min, max int64
}

type bucket struct{ at []int32 }

// NewTable returns an empty table.
func NewTable() *Table {
	return &Table{index: map[WorkerID]int32{}, buckets: map[int64]*bucket{}}
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
	return t.clock[i], true
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

// at returns the indices whose clock is c; the caller must not keep or
// change the slice.
func (t *Table) at(c int64) []int32 {
	if b := t.buckets[c]; b != nil {
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
	if len(t.index) == 0 {
		t.min, t.max = c, c
	} else {
		t.min, t.max = min(t.min, c), max(t.max, c)
	}
	var i int32
	if n := len(t.free); n > 0 {
		i = t.free[n-1]
		t.free = t.free[:n-1]
		t.ids[i], t.clock[i] = w, c
	} else {
		i = int32(len(t.ids))
		t.ids = append(t.ids, w)
		t.clock = append(t.clock, c)
		t.pos = append(t.pos, 0)
	}
	t.index[w] = i
	t.put(i, c)
	return i, nil
}

// remove takes index i out of the table and frees it.
func (t *Table) remove(i int32) {
	t.take(i)
	delete(t.index, t.ids[i])
	t.ids[i] = ""
	t.free = append(t.free, i)
	if len(t.index) == 0 {
		t.min, t.max = 0, 0
		return
	}
	for t.buckets[t.min] == nil {
		t.min++
	}
	for t.buckets[t.max] == nil {
		t.max--
	}
}

// advance increments i's clock and returns the new value.
func (t *Table) advance(i int32) int64 {
	old := t.clock[i]
	emptied := t.take(i)
	t.clock[i] = old + 1
	t.put(i, old+1)
	// The worker itself now sits at old+1, so an emptied min moves by one.
	if old == t.min && emptied {
		t.min++
	}
	t.max = max(t.max, old+1)
	return old + 1
}

func (t *Table) put(i int32, c int64) {
	b := t.buckets[c]
	if b == nil {
		b = t.spareBucket()
		t.buckets[c] = b
	}
	t.pos[i] = int32(len(b.at))
	b.at = append(b.at, i)
}

// take removes i from its bucket and reports whether the bucket emptied.
func (t *Table) take(i int32) bool {
	c := t.clock[i]
	b := t.buckets[c]
	last := int32(len(b.at) - 1)
	if p := t.pos[i]; p != last {
		moved := b.at[last]
		b.at[p] = moved
		t.pos[moved] = p
	}
	b.at = b.at[:last]
	if last == 0 {
		delete(t.buckets, c)
		t.reuse(b)
		return true
	}
	return false
}

// spareBucket returns an empty bucket, reused if one is spare.
func (t *Table) spareBucket() *bucket {
	if n := len(t.spare); n > 0 {
		b := t.spare[n-1]
		t.spare = t.spare[:n-1]
		return b
	}
	return &bucket{}
}

// reuse takes back an emptied bucket.
func (t *Table) reuse(b *bucket) {
	b.at = b.at[:0]
	t.spare = append(t.spare, b)
}
