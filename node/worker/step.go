package worker

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"dsspmesh/node/records"
	"dsspmesh/shardapi"
)

// The loop's decisions, apart from its I/O (docs/design.md#one-iteration-end-to-end).
// Step holds what the decisions read and write — the worker's clock on
// each shard, the version of each slice of θ, the refusals in a row — and
// its methods take what happened (a push's reply, a re-add's clock, a
// whole push's outcome) and say what to do next. It computes nothing,
// sends nothing and reads no clock: the loop (worker.go, pipeline.go)
// does the I/O the decisions name, and step_test.go replays the golden
// transcripts testdata/step_*.txt through Step (internal/golden).
//
// Only Step's methods write its fields (the loop reads them). Ownership
// follows the loop's: while a push is in flight its goroutines call Keep,
// Replied and ReAdded, each for its own shard s only (they read and write
// Iters[s] alone); the loop calls the rest only when no push is in flight.
type Step struct {
	// Iters is the worker's next iteration on each shard; align keeps
	// them equal except during a push.
	Iters []int64
	// Reads is the version of each shard's slice of θ.
	Reads []records.SliceRead
	// Ahead is how many iterations after a push's its slice serves: 1, 2
	// under --pipeline (the next one is computed while the push after it
	// is in flight).
	Ahead int64
	// Slack is how many iterations a kept slice may miss (pull.go).
	Slack int64
	// InARow counts the pushes refused in a row (maxRefusedInARow).
	InARow int
}

// NewStep is the decisions of a worker of shards shards.
func NewStep(shards int, ahead, slack int64) *Step {
	return &Step{Iters: make([]int64, shards), Reads: make([]records.SliceRead, shards), Ahead: ahead, Slack: slack}
}

// maxRefusedInARow is how many iterations in a row the shards may refuse
// this worker's gradient (NaN/Inf, outlier, non-finite step) before it
// stops: one bad gradient now and then is a flaky device, recomputed and
// sent again; an unbroken run of them is a broken one or a diverging job.
const maxRefusedInARow = 20

// Next is the iteration to compute with no push in flight: the lowest
// clock (a shard that took the iteration before another refused it is one
// ahead). With a push of iteration t in flight the next is t+1 (the loop
// may not read Iters then).
func (m *Step) Next() int64 { return slices.Min(m.Iters) }

// Targets says which shards the next gradient goes to: with no push in
// flight, those whose clock is the lowest (the push skips the others,
// which took the iteration before another shard refused it); with one in
// flight (whose Iters the loop may not read), every shard.
func (m *Step) Targets(inFlight bool) []bool {
	push := make([]bool, len(m.Iters))
	low := int64(math.MaxInt64)
	if !inFlight {
		low = slices.Min(m.Iters)
	}
	for s := range push {
		push[s] = inFlight || m.Iters[s] <= low
	}
	return push
}

// Keep reports whether the push of samples to shard s asks for no
// parameters: the worker's copy of s's slice is fresh enough for every
// iteration the reply would serve (pull.go). join's fetch (no samples)
// always asks.
func (m *Step) Keep(s int, samples int64) bool {
	r := m.Reads[s]
	return samples > 0 && m.Slack > 0 && r.Index > 0 && !r.Unchecked && r.Covers(m.Iters[s]+m.Ahead, m.Slack)
}

// PushAction is what a push goroutine does after a reply.
type PushAction int

const (
	// PushDone: the shard took the iteration (Iters[s] moved on).
	PushDone PushAction = iota
	// PushResend: send the same (worker, iter) again — a transport error,
	// a leader that changed or is not known yet, a re-add that failed;
	// the shard's dedupe applies it at most once.
	PushResend
	// PushReAdd: the shard no longer has this worker (declared dead by
	// mistake): add it again at no less than Iters[s], then ReAdded.
	PushReAdd
	// PushFetch: re-added ahead: send the iteration before (Iters[s] was
	// set to it) with no samples and a zero gradient, dropping this
	// gradient; the dedupe answers it outside the gate.
	PushFetch
	// PushGiveUp: stop this shard's push with the error: ctx ended, or
	// a rejection resending cannot repair (settled by Settle).
	PushGiveUp
)

var pushActionNames = [...]string{"done", "resend", "re-add", "fetch", "give-up"}

func (a PushAction) String() string { return pushActionNames[a] }

// Reply is what came back for one push to one shard.
type Reply struct {
	Err error
	// Canceled: the worker's ctx had ended when the reply came.
	Canceled bool
	// Held is how long the gate held the push (0: released at once).
	Held time.Duration
}

// PushDecision is Replied's answer.
type PushDecision struct {
	Act PushAction
	// ObserveHold > 0 is a gate hold to observe (worker_gate_hold_seconds).
	ObserveHold time.Duration
	// Rejected: a shard rejected the push: record an event.
	Rejected bool
}

// Replied decides what the push goroutine of shard s does with r.
func (m *Step) Replied(s int, r Reply) PushDecision {
	d := PushDecision{ObserveHold: r.Held}
	var rej *shardapi.RejectError
	switch {
	case r.Err == nil:
		m.Iters[s]++
		d.Act = PushDone
	case r.Canceled:
		d.Act = PushGiveUp
	case errors.As(r.Err, &rej):
		d.Rejected = true
		d.Act = PushGiveUp
		if rej.Reason == shardapi.ReasonUnknownWorker {
			d.Act = PushReAdd
		}
	default:
		d.Act = PushResend
	}
	return d
}

// ReAdded decides what follows a re-add of shard s that answered clock
// clk (err nil): re-added at or below this iteration, resend it at clk;
// re-added ahead (the shard's t_min is higher), fetch instead. This
// gradient, pushed at clk, would wait at the gate for workers that may in
// turn wait for this one on a shard where it is still at this iteration —
// a cycle no push breaks (a bsp mesh stalled so after a healed
// partition) — so Iters[s] becomes clk−1, which dedupe answers outside
// the gate, and align, after this push, moves the other shards up.
func (m *Step) ReAdded(s int, clk int64, err error) PushAction {
	switch {
	case err != nil:
		return PushResend
	case clk > m.Iters[s]:
		m.Iters[s] = clk - 1
		return PushFetch
	default:
		m.Iters[s] = clk
		return PushResend
	}
}

// Verdict is how a whole push of every shard settled.
type Verdict int

const (
	// Completed: every shard took the iteration and the clocks are all
	// the next one.
	Completed Verdict = iota
	// Moved: every shard took it but the clocks are not all the next one
	// (a shard re-added the worker higher): align when NeedAlign, then
	// MarkMoved; a gradient computed ahead is dropped.
	Moved
	// Refused: a shard refused the gradient itself: compute another and
	// send the same iteration to the shards that refused it.
	Refused
	// Stop: the worker stops (ctx ended, or a rejection it cannot repair:
	// Err says which, nil for ctx).
	Stop
)

var verdictNames = [...]string{"completed", "moved", "refused", "stop"}

func (v Verdict) String() string { return verdictNames[v] }

// Settlement is Settle's answer.
type Settlement struct {
	Verdict Verdict
	// Refused, when not nil, is a refusal to count and log (the last one
	// before a Stop too).
	Refused error
	// Err is the error a Stop fails with; nil for a plain stop (ctx).
	Err error
}

// Settle decides what a push of iteration iter that returned err (the
// join of every shard's) means. canceled: the worker's ctx had ended.
func (m *Step) Settle(iter int64, err error, canceled bool) Settlement {
	if err != nil {
		if canceled {
			return Settlement{Verdict: Stop}
		}
		var refused error
		if refusedGradient(err) {
			// Nothing was applied where it was refused.
			m.InARow++
			refused = err
			if m.InARow < maxRefusedInARow {
				return Settlement{Verdict: Refused, Refused: refused}
			}
			err = fmt.Errorf("%d gradients in a row refused (a broken device or a diverging job): %w", m.InARow, err)
		}
		// A rejection the worker cannot repair: stopping loudly beats a
		// worker that silently holds every other one at the staleness
		// bound.
		return Settlement{Verdict: Stop, Refused: refused, Err: err}
	}
	m.InARow = 0
	if slices.Min(m.Iters) == iter+1 && slices.Max(m.Iters) == iter+1 {
		return Settlement{Verdict: Completed}
	}
	return Settlement{Verdict: Moved}
}

// NeedAlign reports whether the clocks differ (after a Moved push).
func (m *Step) NeedAlign() bool { return slices.Min(m.Iters) != slices.Max(m.Iters) }

// MarkMoved marks unchecked the slices read for a lower clock than the
// one after iter, once align has moved the clocks.
func (m *Step) MarkMoved(iter int64) {
	for s := range m.Iters {
		m.Reads[s].Unchecked = m.Reads[s].Unchecked || m.Iters[s] != iter+1
	}
}

// AlignRound is align's next round: the clock to add the worker at (the
// highest it has on any shard) and the shards to add it to — every one
// when every, else those not at it; none once the clocks are equal.
func (m *Step) AlignRound(every bool) (target int64, shards []int) {
	target = slices.Max(m.Iters)
	for s, it := range m.Iters {
		if every || it != target {
			shards = append(shards, s)
		}
	}
	return target, shards
}

// aligned takes an align's answer: shard s has the worker at clk.
func (m *Step) aligned(s int, clk int64) { m.Iters[s] = clk }

// rejoin forgets the clocks before a join, which asks every shard.
func (m *Step) rejoin() { clear(m.Iters) }

// landed takes shard s's slice of θ as a push's reply brought it, read at r.
func (m *Step) landed(s int, r records.SliceRead) { m.Reads[s] = r }

// lent takes shard s's slice of θ back from the evaluation, read at v: a
// read made after one outside the gate (join's fetch, a moved clock) is as
// far outside, no OK having waited for the bound since.
func (m *Step) lent(s int, v shardapi.Version) {
	m.Reads[s] = records.SliceRead{Version: v, Unchecked: m.Reads[s].Unchecked}
}

// JoinFetch sets the clocks for join's fetch, once align has made them
// equal: at a clock above 0 the iteration before, which the shard's
// dedupe acknowledges without applying; a new worker at 0 sends a real
// iteration with no samples. It returns the iteration to send.
func (m *Step) JoinFetch() int64 {
	for s, it := range m.Iters {
		if it > 0 {
			m.Iters[s] = it - 1
		}
	}
	return m.Next()
}

// aheadOf is how many samples of a batch the loop computes while the push
// before it is in flight: all but fresh (a fraction) of them, at least
// one on each side (a batch of one goes whole).
func aheadOf(fresh float64, batch int) int {
	n := int(math.Round(fresh * float64(batch)))
	if n <= 0 || batch < 2 {
		return batch
	}
	return min(max(batch-n, 1), batch-1)
}

// DropAhead reports whether a gradient computed while the push of v was
// in flight is dropped: it was computed for the iteration after, and the
// push is to be sent again (refused) or the clocks moved.
func (v Verdict) DropAhead() bool { return v != Completed }

// refusedGradient reports whether every error in err (a push's join) is a
// shard refusing the gradient itself: NaN/Inf, a norm outlier, or a step
// that would make a parameter non-finite.
func refusedGradient(err error) bool {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		var rej *shardapi.RejectError
		if !errors.As(e, &rej) {
			return false
		}
		switch rej.Reason {
		case shardapi.ReasonNonFinite, shardapi.ReasonOutlier, shardapi.ReasonNonFiniteStep:
		default:
			return false
		}
	}
	return len(errs) > 0
}
