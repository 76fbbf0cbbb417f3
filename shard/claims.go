package shard

import (
	"fmt"
	"math"
	"slices"

	"dsspmesh/clock"
	"dsspmesh/shardapi"
)

// The claims' sub-machine (docs/design.md, "The evaluator"): the
// evaluation claims shard 0 recorded, the newest shardapi.MaxClaims. A
// claim entry (entryClaim, its header a shardapi.Claim) is recorded only
// when its By is the worker the evaluation lease names at the entry's
// index (gateState.evaluator), and only once per (By, Seq): the same
// claim again is a resend (recorded already, nothing changes); another
// digest, accuracy or loss for a recorded sequence, or a sequence below
// the newest of the same evaluator, is refused. So no member records a
// claim it did not make while it held the lease, and no evaluator claims
// two files for one evaluation.
//
// Its section is "claims", absent while none is recorded.

// claimBook is the sub-machine.
type claimBook struct {
	recs []shardapi.Claim // oldest first
}

// apply records c, made by holder's lease at index at; refused says why
// it changed nothing ("" when it recorded c or had it already).
func (b *claimBook) apply(c shardapi.Claim, holder clock.WorkerID, at uint64) (refused string) {
	if holder == "" {
		return fmt.Sprintf("%q %s (no worker does: none has had a push applied)", c.By, shardapi.NotHolder)
	}
	if clock.WorkerID(c.By) != holder {
		return fmt.Sprintf("%q %s (%q does)", c.By, shardapi.NotHolder, holder)
	}
	for _, r := range slices.Backward(b.recs) {
		if r.By != c.By {
			continue
		}
		switch {
		case sameClaim(r, c):
			return "" // a resend
		case c.Seq == r.Seq:
			return fmt.Sprintf("%q claimed sequence %d already, with digest %s", c.By, c.Seq, r.Digest)
		case c.Seq < r.Seq:
			return fmt.Sprintf("%q claimed sequence %d already, after %d", c.By, r.Seq, c.Seq)
		}
		break // the newest of c.By is older: c is new
	}
	c.Index = at
	b.recs = append(b.recs, c)
	if len(b.recs) > shardapi.MaxClaims {
		b.recs = slices.Delete(b.recs, 0, len(b.recs)-shardapi.MaxClaims)
	}
	return ""
}

// sameClaim reports whether a and b are one claim, a NaN loss or
// accuracy equal to itself (a diverged evaluation's claim), whatever
// their Index.
func sameClaim(a, b shardapi.Claim) bool {
	bits := math.Float64bits
	return a.By == b.By && a.Seq == b.Seq && a.Iter == b.Iter && a.Samples == b.Samples && a.Digest == b.Digest &&
		bits(a.Accuracy) == bits(b.Accuracy) && bits(a.Loss) == bits(b.Loss)
}

// list is a copy of the claims, oldest first.
func (b *claimBook) list() []shardapi.Claim { return slices.Clone(b.recs) }

// save writes the section, "claims", none while empty.
func (b *claimBook) save(h *header) error {
	if len(b.recs) > 0 {
		h.put("claims", b.recs)
	}
	return nil
}

// load reads the section, checked as the entries that made it were.
func (b *claimBook) load(h *header, _ job) error {
	var recs []shardapi.Claim
	if _, err := h.get("claims", &recs); err != nil {
		return err
	}
	if len(recs) > shardapi.MaxClaims {
		return fmt.Errorf("claims: %d, at most %d", len(recs), shardapi.MaxClaims)
	}
	for _, r := range recs {
		if err := r.Check(); err != nil {
			return err
		}
	}
	b.recs = recs
	return nil
}
