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
// proposed: no NaN or ±Inf, and, when the shard's Spec.OutlierFactor asks,
// a norm no larger than that factor times the median norm of the shard's
// recent pushes. It is leader-local (nothing replicated depends on it), so
// a new leader starts with an empty window. It also counts, per worker,
// what it refused and how many refusals came in a row.
type hygiene struct {
	mu      sync.Mutex
	norms   []float64 // ring of the last normWindow accepted norms
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

// check returns ReasonNonFinite or ReasonOutlier with a detail, or 0 if the
// gradient (raw little-endian float32) may be proposed. factor is
// Spec.OutlierFactor; samples == 0 marks a join's zero push, which neither
// counts toward the median nor is checked against it.
func (h *hygiene) check(w clock.WorkerID, prec shardapi.Precision, grad []byte, samples int64, factor float64) (shardapi.Reason, string) {
	i, x, sq := prec.Scan(grad)
	if i >= 0 {
		h.refused(w, shardapi.ReasonNonFinite)
		return shardapi.ReasonNonFinite, fmt.Sprintf("value %d is %v", i, x)
	}
	if factor <= 0 || samples == 0 {
		h.accepted(w, -1)
		return 0, ""
	}
	norm := math.Sqrt(sq)
	h.mu.Lock()
	med, ok := h.medianLocked()
	h.mu.Unlock()
	if ok && norm > factor*med {
		h.refused(w, shardapi.ReasonOutlier)
		return shardapi.ReasonOutlier, fmt.Sprintf("norm %.4g exceeds %g × the recent median %.4g", norm, factor, med)
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
		c.Outliers++
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
