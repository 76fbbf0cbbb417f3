package shard

import (
	"dsspmesh/shardapi"
	"fmt"
	"math"
	"slices"
	"sync"

	"dsspmesh/clock"
)

// hygiene is the leader's check of a push's gradient before it is
// proposed (docs/design.md, "The leader's outlier rule"): no NaN or ±Inf,
// no gradient on a push of no samples, and a norm no larger than the
// spec's outlier factor times the median norm of the shard's recent
// pushes (a round's pseudo-gradient of norm at most roundFloor × ‖θ‖ is
// no outlier). Leader-local: a new leader starts with an empty window. It
// counts, per worker, what it refused and how many refusals came in a row.
type hygiene struct {
	mu      sync.Mutex
	norms   []float64 // ring of the last normWindow accepted non-zero norms
	next    int
	workers map[clock.WorkerID]*shardapi.WorkerRefusals
}

// normWindow pushes make the median; the outlier check waits for
// minNormSamples of them so that the first pushes set the scale.
const (
	normWindow     = 64
	minNormSamples = 16
)

func newHygiene() *hygiene { return &hygiene{workers: map[clock.WorkerID]*shardapi.WorkerRefusals{}} }

// roundFloor: a round's pseudo-gradient of norm at most roundFloor × the
// norm of the leader's θ is never an outlier (hygiene). Honest rounds
// after convergence reach 1.9e-4 of it (TestOutlierRuleRefusesNoHonestRound).
const roundFloor = 1e-3

// check returns ReasonNonFinite, ReasonOutOfBounds or ReasonOutlier with a
// detail, or 0 if the gradient (encoded in spec.Precision) of a push of
// samples may be proposed. floor, nil for a gradient, is a norm at or
// below which the push is no outlier: roundFloor × ‖θ‖ for a round's
// pseudo-gradient, asked only of a push past the median's bound (it reads
// the whole slice).
func (h *hygiene) check(w clock.WorkerID, spec shardapi.Spec, grad []byte, samples int64, floor func() float64) (shardapi.Reason, string) {
	i, x, sq := spec.Precision.Scan(grad)
	if i >= 0 {
		h.refused(w, shardapi.ReasonNonFinite)
		return shardapi.ReasonNonFinite, fmt.Sprintf("value %d is %v", i, x)
	}
	if r, d := checkZeroSamples(samples, sq); r != 0 {
		h.refused(w, r)
		return r, d
	}
	norm := math.Sqrt(sq)
	if spec.Weighted() {
		norm *= float64(samples) / float64(spec.BalanceBase)
	}
	if norm == 0 {
		h.accepted(w, -1)
		return 0, ""
	}
	factor := spec.Outlier()
	h.mu.Lock()
	med, ok := h.medianLocked()
	h.mu.Unlock()
	if ok && !(norm <= factor*med) {
		var fl float64
		if floor != nil {
			fl = floor()
		}
		if !(norm <= fl) {
			h.refused(w, shardapi.ReasonOutlier)
			if fl > 0 {
				return shardapi.ReasonOutlier, fmt.Sprintf("norm %.4g exceeds %g × the recent median %.4g and %g × ‖θ‖ = %.4g", norm, factor, med, roundFloor, fl)
			}
			return shardapi.ReasonOutlier, fmt.Sprintf("norm %.4g exceeds %g × the recent median %.4g", norm, factor, med)
		}
	}
	h.accepted(w, norm)
	return 0, ""
}

func (h *hygiene) medianLocked() (float64, bool) {
	if len(h.norms) < minNormSamples {
		return 0, false
	}
	s := slices.Clone(h.norms)
	slices.Sort(s)
	return s[len(s)/2], true
}

func (h *hygiene) refused(w clock.WorkerID, r shardapi.Reason) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.workers[w]
	if c == nil {
		c = &shardapi.WorkerRefusals{}
		h.workers[w] = c
	}
	if r == shardapi.ReasonNonFinite {
		c.NonFinite++
	} else {
		c.Outliers++ // norm outliers and gradients on pushes of no samples
	}
	c.Streak++
}

// accepted records a push that passed; norm < 0 is not added to the window.
func (h *hygiene) accepted(w clock.WorkerID, norm float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c := h.workers[w]; c != nil {
		c.Streak = 0
	}
	if norm < 0 {
		return
	}
	if len(h.norms) < normWindow {
		h.norms = append(h.norms, norm)
		return
	}
	h.norms[h.next] = norm
	h.next = (h.next + 1) % normWindow
}

// stats copies the per-worker counts.
func (h *hygiene) stats() map[clock.WorkerID]shardapi.WorkerRefusals {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[clock.WorkerID]shardapi.WorkerRefusals, len(h.workers))
	for w, c := range h.workers {
		out[w] = *c
	}
	return out
}
