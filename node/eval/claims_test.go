package eval

import (
	"context"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"dsspmesh/node/records"
)

type EvalResult = records.EvalResult

// claimsNode is the claims of node "c" of a mesh of a, b (both training)
// and c, whose view designates a as the evaluator; stopped records what
// ClaimDeps.Diverged was told.
type claimsNode struct {
	*Claims
	evaluator string
	bound     func() (uint64, bool)
	check     func(context.Context) (bool, string, error)
	stopped   []string
	wg        sync.WaitGroup
}

func newClaimsNode() *claimsNode {
	n := &claimsNode{evaluator: "a"}
	n.Claims = NewClaims(ClaimDeps{Evaluator: func() string { return n.evaluator }, Now: time.Now, Logger: slog.New(slog.DiscardHandler),
		SeqBound: func() (uint64, bool) {
			if n.bound == nil {
				return 0, false
			}
			return n.bound()
		},
		Check:    func(ctx context.Context) (bool, string, error) { return n.check(ctx) },
		Training: func() bool { return true },
		Diverged: func(what string) { n.stopped = append(n.stopped, what) },
		Go:       func(f func()) { n.wg.Add(1); go func() { defer n.wg.Done(); f() }() },
	})
	return n
}

func (n *claimsNode) shown() *EvalResult { e, _ := n.Held(); return e }

// TestEvalOrderedBySequenceNotClock: an evaluation whose clock runs an
// hour ahead does not freeze the one shown; a newer state of the
// parameters (larger Seq) replaces it whatever its time says.
func TestEvalOrderedBySequenceNotClock(t *testing.T) {
	n := newClaimsNode()
	now := time.Unix(1000, 0)
	n.Set(EvalResult{Accuracy: 0.5, Seq: 100, At: now, By: "a"})
	n.Set(EvalResult{Accuracy: 0.4, Seq: 50, At: now.Add(time.Hour), By: "a"})
	if e := n.shown(); e.Accuracy != 0.5 {
		t.Fatalf("an older state with a later clock won: %+v", e)
	}
	n.Set(EvalResult{Accuracy: 0.6, Seq: 150, At: now.Add(-time.Hour), By: "a"})
	if e := n.shown(); e.Accuracy != 0.6 {
		t.Fatalf("a newer state with an earlier clock lost: %+v", e)
	}
	if _, h := n.Held(); len(h) != 2 {
		t.Fatalf("history %d", len(h))
	}
}

// TestEvalFromNonEvaluatorIgnored: an evaluation signed by a member that
// is not the evaluator of this node's view sets nothing, however new its
// sequence; the evaluator's own is taken.
func TestEvalFromNonEvaluatorIgnored(t *testing.T) {
	n := newClaimsNode()
	ctx := context.Background()
	if err := n.Receive(ctx, "b", EvalResult{Accuracy: 0.99, Seq: 10, By: "b"}); err == nil {
		t.Fatal("a non-evaluator's evaluation was taken without an error")
	}
	if e := n.shown(); e != nil {
		t.Fatalf("a non-evaluator's evaluation is shown: %+v", e)
	}
	if err := n.Receive(ctx, "a", EvalResult{Accuracy: 0.5, Seq: 5, By: "a"}); err != nil {
		t.Fatalf("the evaluator's evaluation refused: %v", err)
	}
	if e := n.shown(); e == nil || e.By != "a" || e.Accuracy != 0.5 {
		t.Fatalf("shown %+v", e)
	}
	// Signing as the evaluator from another stream is no better.
	if err := n.Receive(ctx, "b", EvalResult{Accuracy: 0.99, Seq: 50, By: "a"}); err == nil || n.shown().Accuracy != 0.5 {
		t.Fatalf("an evaluation by a sent by b was taken: %v, shown %+v", err, n.shown())
	}
}

// TestEvalMaxUint64SeqDoesNotPin: a sequence beyond any state of the
// parameters is dropped, from the evaluator too, and the evaluator's next
// honest evaluation is shown; a new evaluator's sequence starts afresh.
func TestEvalMaxUint64SeqDoesNotPin(t *testing.T) {
	n := newClaimsNode()
	ctx := context.Background()
	n.Receive(ctx, "b", EvalResult{Accuracy: 0.99, Seq: math.MaxUint64, By: "b"})
	n.Receive(ctx, "a", EvalResult{Accuracy: 0.99, Seq: math.MaxUint64, By: "a"})
	if err := n.Receive(ctx, "a", EvalResult{Accuracy: 0.5, Seq: 100, By: "a"}); err != nil {
		t.Fatal(err)
	}
	if e := n.shown(); e == nil || e.Accuracy != 0.5 || e.Seq != 100 {
		t.Fatalf("pinned: shown %+v", e)
	}
	if got := n.Dropped(); got != 2 {
		t.Fatalf("dropped %d, want 2", got)
	}
	// a leaves: b is the evaluator now, and its sequence (a little behind
	// a's last, read from other leaders) is taken.
	n.evaluator = "b"
	if err := n.Receive(ctx, "b", EvalResult{Accuracy: 0.6, Seq: 90, By: "b"}); err != nil {
		t.Fatal(err)
	}
	if e := n.shown(); e.By != "b" || e.Accuracy != 0.6 {
		t.Fatalf("the new evaluator's evaluation not shown: %+v", e)
	}
}

// TestEvalSeqFarAheadDropped: the evaluator's own evaluation with a
// sequence beyond what the shards here count is dropped; the next one in
// bounds is shown.
func TestEvalSeqFarAheadDropped(t *testing.T) {
	n := newClaimsNode()
	n.bound = func() (uint64, bool) { return 1000, true }
	ctx := context.Background()
	if err := n.Receive(ctx, "a", EvalResult{Accuracy: 0.99, Seq: 5000, By: "a"}); err == nil || n.shown() != nil {
		t.Fatalf("a sequence far ahead was taken: %v, shown %+v", err, n.shown())
	}
	if err := n.Receive(ctx, "a", EvalResult{Accuracy: 0.5, Seq: 900, By: "a"}); err != nil || n.shown() == nil || n.shown().Accuracy != 0.5 {
		t.Fatalf("in bounds: %v, shown %+v", err, n.shown())
	}
}

// TestDivergedClaimWithFiniteParametersDoesNotStop: the evaluator's claim
// that the job diverged stops this node's worker only when the check of
// the parameters here sees it too.
func TestDivergedClaimWithFiniteParametersDoesNotStop(t *testing.T) {
	n := newClaimsNode()
	checks := 0
	n.check = func(context.Context) (bool, string, error) { checks++; return false, "", nil }
	n.Receive(context.Background(), "a", EvalResult{Accuracy: 0.1, Loss: math.Inf(1), Seq: 20, By: "a", Diverged: true})
	n.wg.Wait()
	if len(n.stopped) != 0 {
		t.Fatalf("a diverged claim with finite parameters stopped training: %q", n.stopped)
	}
	if checks != 1 {
		t.Fatalf("checked %d times", checks)
	}
	if e := n.shown(); e != nil {
		t.Fatalf("an unconfirmed divergence is shown: %+v", e)
	}
}

// TestDivergedClaimSeenHereStops: when the parameters read here show the
// divergence, the worker stops, told what was seen, and the claim is
// shown.
func TestDivergedClaimSeenHereStops(t *testing.T) {
	n := newClaimsNode()
	n.check = func(context.Context) (bool, string, error) { return true, "parameter 3 is NaN", nil }
	n.Receive(context.Background(), "a", EvalResult{Accuracy: 0.1, Loss: math.NaN(), Seq: 20, By: "a", Diverged: true})
	n.wg.Wait()
	if len(n.stopped) != 1 || !strings.Contains(n.stopped[0], "parameter 3 is NaN") || !strings.Contains(n.stopped[0], "a claimed it at sequence 20") {
		t.Fatalf("stopped %q", n.stopped)
	}
	if e := n.shown(); e == nil || !e.Diverged {
		t.Fatalf("the confirmed divergence is not shown: %+v", e)
	}
}
