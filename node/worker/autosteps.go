package worker

import (
	"fmt"
	"math"
	"time"
)

// H from the link (--local-steps auto; docs/design.md, "H from the
// link"): with Config.AutoSteps each round's local steps are chosen from
// what this worker measured of its own last rounds — a local step's
// compute and a push's time on the wire (the slowest shard's reply, less
// the time the gate held it: waiting for other workers is no link cost) —
// so that a push costs at most autoShare of a round: H ≥ (1−autoShare)/
// autoShare × wire ÷ step, rounded up to a power of two (a round's length
// does not jitter with the noise of each measurement), at least 2 and at
// most Config.LocalSteps (the flag's bound). Both measurements are
// exponentially weighted (autoWeight a round), so H follows the link as it
// changes within a few rounds. The first round, measured before anything
// is known, has 2 steps.
//
// Under --balance shard 0 sizes each round's share, so the worker does
// not choose H: it asks (want) for the global round at which its share
// would hold the steps its link needs, and shard 0 sizes the job's round
// from every worker's ask (docs/design.md, "H from the link").
//
// Owned by the loop goroutine; the status's copy of H and its reason is
// written under the worker's lock.
type autoSteps struct {
	max    int
	stepNs float64 // a local step's compute
	wireNs float64 // a push's time on the wire
	need   float64 // the steps a round needs to keep a push within autoShare
	h      int     // the next round's steps; 0 before the first measurement
	reason string
}

const (
	// autoShare is the share of a round a push may take.
	autoShare = 0.1
	// autoWeight is the weight of the newest round in the averages.
	autoWeight = 0.3
)

// steps is the next round's local steps.
func (a *autoSteps) steps() int {
	if a.h == 0 {
		return min(2, max(a.max, 1))
	}
	return a.h
}

// observe takes a completed round of steps steps that computed for
// compute and spent wire on the wire, and chooses the next round's H.
func (a *autoSteps) observe(steps int, compute, wire time.Duration) {
	if steps <= 0 || compute <= 0 || wire < 0 {
		return
	}
	step, w := float64(compute)/float64(steps), float64(wire)
	if a.h == 0 {
		a.stepNs, a.wireNs = step, w
	} else {
		a.stepNs += autoWeight * (step - a.stepNs)
		a.wireNs += autoWeight * (w - a.wireNs)
	}
	need := (1 - autoShare) / autoShare * a.wireNs / a.stepNs
	a.need = need
	h := 2
	for h < a.max && float64(h) < need {
		h *= 2
	}
	h = min(h, max(a.max, 1))
	a.h = h
	a.reason = fmt.Sprintf("auto: a push %s on the wire, a step %s: H %d keeps a push within %.0f %% of a round", durText(a.wireNs), durText(a.stepNs), h, 100*autoShare)
	if float64(h) < need {
		a.reason = fmt.Sprintf("auto: a push %s on the wire, a step %s: H %d, the bound (--local-steps auto:%d); a push is %.0f %% of a round", durText(a.wireNs), durText(a.stepNs), h, a.max, 100*a.wireNs/(a.wireNs+float64(h)*a.stepNs))
	}
}

// want is the global round, in samples, this worker asks shard 0 for
// under --balance: the one at which its share (share of global, as the
// assignment it last computed names) holds the steps of batch samples it
// needs, within the bound; 0 before a measurement or an assignment.
func (a *autoSteps) want(batch int, share, global int64) int64 {
	if a.need <= 0 || share <= 0 || global <= 0 {
		return 0
	}
	steps := math.Min(a.need, float64(a.max))
	return int64(math.Ceil(steps * float64(batch) * float64(global) / float64(share)))
}

// balancedReason is the status's reason under --balance, for a round of
// steps steps on a share of share samples of global.
func (a *autoSteps) balancedReason(steps int, share, global int64) string {
	if a.need <= 0 {
		return fmt.Sprintf("auto with --balance: shard 0 sizes the rounds; %d steps this round, the link not measured yet", steps)
	}
	return fmt.Sprintf("auto with --balance: a push %s on the wire, a step %s: %.0f steps keep a push within %.0f %% of a round; shard 0 sizes the rounds (global %d samples), this round's share %d samples in %d steps",
		durText(a.wireNs), durText(a.stepNs), math.Ceil(math.Min(a.need, float64(a.max))), 100*autoShare, global, share, steps)
}

// durText is ns as milliseconds, to a precision that reads.
func durText(ns float64) string {
	ms := ns / 1e6
	switch {
	case ms >= 100:
		return fmt.Sprintf("%.0f ms", ms)
	case ms >= 1:
		return fmt.Sprintf("%.1f ms", ms)
	}
	return fmt.Sprintf("%.2f ms", math.Max(ms, 0))
}
