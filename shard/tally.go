package shard

import (
	"fmt"
	"math"

	"dsspmesh/shardapi"
)

// tally counts what the shard applied and refused: the global samples
// applied (the learning-rate schedule's input), the pushes applied, the
// duplicates and the refusals by reason. Every count saturates. Its
// section: samples, pushes, dups, rejected.
type tally struct {
	samples    int64
	pushes     uint64
	duplicates uint64
	rejected   [shardapi.NumReasons]uint64
}

func (t *tally) refuse(r shardapi.Reason) { t.rejected[r] = satAddU(t.rejected[r], 1) }

func (t *tally) duplicate() { t.duplicates = satAddU(t.duplicates, 1) }

// applied counts an entry's n pushes applied, of samples samples.
func (t *tally) applied(n int, samples int64) {
	t.samples = satAdd(t.samples, samples)
	t.pushes = satAddU(t.pushes, uint64(n))
}

// report fills the counts of a status.
func (t *tally) report(s *shardapi.Status) {
	s.Samples, s.Pushes, s.Duplicates, s.Rejected = t.samples, t.pushes, t.duplicates, map[string]uint64{}
	for r := shardapi.Reason(1); r < shardapi.NumReasons; r++ {
		if n := t.rejected[r]; n > 0 {
			s.Rejected[r.String()] = n
		}
	}
}

func (t *tally) save(h *header) error {
	h.put("samples", t.samples)
	h.put("pushes", t.pushes)
	h.put("dups", t.duplicates)
	h.put("rejected", t.rejected[1:])
	return nil
}

func (t *tally) load(h *header, _ job) error {
	var rej []uint64
	for k, v := range map[string]any{"samples": &t.samples, "pushes": &t.pushes, "dups": &t.duplicates, "rejected": &rej} {
		if _, err := h.get(k, v); err != nil {
			return err
		}
	}
	// Older builds knew fewer reasons; their counters come first.
	if len(rej) > int(shardapi.NumReasons)-1 {
		return fmt.Errorf("%d rejection counters, this build knows %d", len(rej), int(shardapi.NumReasons)-1)
	}
	copy(t.rejected[1:], rej)
	return nil
}

// Replicated counters saturate rather than wrap: a count at its type's
// bound stays there, so no input drives the state out of its domain (a
// negative sample count, a data position before the start). The bounds on
// a push's fields (checkPush) keep every honest count far below them.

// satAdd is a + b for b ≥ 0, at most math.MaxInt64.
func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// satAddU is a + b, at most math.MaxUint64.
func satAddU(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}

// satMulAdd is a + k·m for k, m ≥ 0, at most math.MaxInt64.
func satMulAdd(a, k, m int64) int64 {
	if k > 0 && m > math.MaxInt64/k {
		return math.MaxInt64
	}
	return satAdd(a, k*m)
}
