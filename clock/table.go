package clock

import "fmt"

// WorkerID names a worker: the mesh node id of the node that trains.
type WorkerID string

// Table is a vector clock table: one iteration counter per live worker.
//
// Min and Max are O(1): workers are kept in buckets by clock. Advance is
// O(1). Remove is O(1) unless it empties the bucket at the min (or max), in
// which case the next non-empty clock is searched (O(spread)). Add is O(1).
// The order of workers inside a bucket depends on history; nothing that
// reads it may depend on that order (see EachAt).
type Table struct {
	slots    map[WorkerID]*slot
	buckets  map[int64][]WorkerID
	min, max int64
}

type slot struct {
	clock int64
	pos   int // index in buckets[clock]
}

// NewTable returns an empty table.
func NewTable() *Table {
	return &Table{slots: map[WorkerID]*slot{}, buckets: map[int64][]WorkerID{}}
}

// Len is the number of workers.
func (t *Table) Len() int { return len(t.slots) }

// Min is the smallest clock, 0 for an empty table.
func (t *Table) Min() int64 { return t.min }

// Max is the largest clock, 0 for an empty table.
func (t *Table) Max() int64 { return t.max }

// Spread is Max − Min.
func (t *Table) Spread() int64 { return t.max - t.min }

// Clock returns w's clock.
func (t *Table) Clock(w WorkerID) (int64, bool) {
	s, ok := t.slots[w]
	if !ok {
		return 0, false
	}
	return s.clock, true
}

// CountAt is the number of workers whose clock is c.
func (t *Table) CountAt(c int64) int { return len(t.buckets[c]) }

// EachAt calls f for every worker whose clock is c, in an unspecified order:
// callers must combine the results order-independently.
func (t *Table) EachAt(c int64, f func(WorkerID)) {
	for _, w := range t.buckets[c] {
		f(w)
	}
}

// Add puts w in the table at clock c.
func (t *Table) Add(w WorkerID, c int64) error {
	if w == "" {
		return ErrBadWorkerID
	}
	if _, ok := t.slots[w]; ok {
		return fmt.Errorf("%w: %q", ErrWorkerExists, w)
	}
	if c < 0 {
		return fmt.Errorf("clock: negative clock %d for worker %q", c, w)
	}
	if len(t.slots) == 0 {
		t.min, t.max = c, c
	} else {
		t.min, t.max = min(t.min, c), max(t.max, c)
	}
	t.slots[w] = &slot{clock: c}
	t.put(w, c)
	return nil
}

// Remove takes w out of the table.
func (t *Table) Remove(w WorkerID) error {
	s, ok := t.slots[w]
	if !ok {
		return &UnknownWorkerError{Worker: w}
	}
	t.take(s)
	delete(t.slots, w)
	if len(t.slots) == 0 {
		t.min, t.max = 0, 0
		return nil
	}
	for len(t.buckets[t.min]) == 0 {
		t.min++
	}
	for len(t.buckets[t.max]) == 0 {
		t.max--
	}
	return nil
}

// Advance increments w's clock and returns the new value.
func (t *Table) Advance(w WorkerID) (int64, error) {
	s, ok := t.slots[w]
	if !ok {
		return 0, &UnknownWorkerError{Worker: w}
	}
	old := s.clock
	t.take(s)
	s.clock++
	t.put(w, s.clock)
	// The worker itself now sits at old+1, so an emptied min moves by one.
	if old == t.min && len(t.buckets[old]) == 0 {
		t.min++
	}
	t.max = max(t.max, s.clock)
	return s.clock, nil
}

func (t *Table) put(w WorkerID, c int64) {
	b := t.buckets[c]
	t.slots[w].pos = len(b)
	t.buckets[c] = append(b, w)
}

func (t *Table) take(s *slot) {
	b := t.buckets[s.clock]
	last := len(b) - 1
	if s.pos != last {
		moved := b[last]
		b[s.pos] = moved
		t.slots[moved].pos = s.pos
	}
	if last == 0 {
		delete(t.buckets, s.clock)
		return
	}
	t.buckets[s.clock] = b[:last]
}
