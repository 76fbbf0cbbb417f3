package node

import (
	"context"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"dsspmesh/mesh"
)

// fixedMembers is a membership view that only lists its members.
type fixedMembers struct {
	mesh.Membership
	ms []mesh.Member
}

func (f fixedMembers) Members() []mesh.Member { return f.ms }

// claimNode is node "c" of a mesh of a, b (both training) and c: its view
// designates a as the evaluator.
func claimNode(t *testing.T) (*Node, *int) {
	t.Helper()
	m := func(id string, trains bool) mesh.Member {
		return mesh.Member{Meta: mesh.Meta{ID: mesh.NodeID(id), Trains: trains}}
	}
	n := &Node{id: "c", now: time.Now, log: slog.New(slog.DiscardHandler), members: fixedMembers{ms: []mesh.Member{m("a", true), m("b", true), m("c", true)}}, phase: "training"}
	halted := 0
	n.worker = &stopWorker{halted: &halted}
	if ev := n.evaluator(); ev != "a" {
		t.Fatalf("evaluator %q", ev)
	}
	return n, &halted
}

// TestEvalFromNonEvaluatorIgnored: an evaluation signed by a member that
// is not the evaluator of this node's view sets nothing, however new its
// sequence; the evaluator's own is taken.
func TestEvalFromNonEvaluatorIgnored(t *testing.T) {
	n, _ := claimNode(t)
	ctx := context.Background()
	if err := n.receiveEval(ctx, "b", EvalResult{Accuracy: 0.99, Seq: 10, By: "b"}); err == nil {
		t.Fatal("a non-evaluator's evaluation was taken without an error")
	}
	if n.eval != nil {
		t.Fatalf("a non-evaluator's evaluation is shown: %+v", n.eval)
	}
	if err := n.receiveEval(ctx, "a", EvalResult{Accuracy: 0.5, Seq: 5, By: "a"}); err != nil {
		t.Fatalf("the evaluator's evaluation refused: %v", err)
	}
	if n.eval == nil || n.eval.By != "a" || n.eval.Accuracy != 0.5 {
		t.Fatalf("shown %+v", n.eval)
	}
	// Signing as the evaluator from another stream is no better.
	if err := n.receiveEval(ctx, "b", EvalResult{Accuracy: 0.99, Seq: 50, By: "a"}); err == nil || n.eval.Accuracy != 0.5 {
		t.Fatalf("an evaluation by a sent by b was taken: %v, shown %+v", err, n.eval)
	}
}

// TestEvalMaxUint64SeqDoesNotPin: a sequence beyond any state of the
// parameters is dropped, from the evaluator too, and the evaluator's next
// honest evaluation is shown; a new evaluator's sequence starts afresh.
func TestEvalMaxUint64SeqDoesNotPin(t *testing.T) {
	n, _ := claimNode(t)
	ctx := context.Background()
	n.receiveEval(ctx, "b", EvalResult{Accuracy: 0.99, Seq: math.MaxUint64, By: "b"})
	n.receiveEval(ctx, "a", EvalResult{Accuracy: 0.99, Seq: math.MaxUint64, By: "a"})
	if err := n.receiveEval(ctx, "a", EvalResult{Accuracy: 0.5, Seq: 100, By: "a"}); err != nil {
		t.Fatal(err)
	}
	if n.eval == nil || n.eval.Accuracy != 0.5 || n.eval.Seq != 100 {
		t.Fatalf("pinned: shown %+v", n.eval)
	}
	if got := n.EvalClaimsDropped(); got != 2 {
		t.Fatalf("dropped %d, want 2", got)
	}
	// a leaves: b is the evaluator now, and its sequence (a little behind
	// a's last, read from other leaders) is taken.
	n.members = fixedMembers{ms: n.members.Members()[1:]}
	if err := n.receiveEval(ctx, "b", EvalResult{Accuracy: 0.6, Seq: 90, By: "b"}); err != nil {
		t.Fatal(err)
	}
	if n.eval.By != "b" || n.eval.Accuracy != 0.6 {
		t.Fatalf("the new evaluator's evaluation not shown: %+v", n.eval)
	}
}

// TestEvalSeqFarAheadDropped: the evaluator's own evaluation with a
// sequence beyond what the shards here count is dropped; the next one in
// bounds is shown.
func TestEvalSeqFarAheadDropped(t *testing.T) {
	n, _ := claimNode(t)
	n.claims.bound = func() (uint64, bool) { return 1000, true }
	ctx := context.Background()
	if err := n.receiveEval(ctx, "a", EvalResult{Accuracy: 0.99, Seq: 5000, By: "a"}); err == nil || n.eval != nil {
		t.Fatalf("a sequence far ahead was taken: %v, shown %+v", err, n.eval)
	}
	if err := n.receiveEval(ctx, "a", EvalResult{Accuracy: 0.5, Seq: 900, By: "a"}); err != nil || n.eval == nil || n.eval.Accuracy != 0.5 {
		t.Fatalf("in bounds: %v, shown %+v", err, n.eval)
	}
}

// TestDivergedClaimWithFiniteParametersDoesNotStop: the evaluator's claim
// that the job diverged stops this node's worker only when the check of
// the parameters here sees it too.
func TestDivergedClaimWithFiniteParametersDoesNotStop(t *testing.T) {
	n, halted := claimNode(t)
	checks := 0
	n.claims.check = func(context.Context) (bool, string, error) { checks++; return false, "", nil }
	n.receiveEval(context.Background(), "a", EvalResult{Accuracy: 0.1, Loss: math.Inf(1), Seq: 20, By: "a", Diverged: true})
	n.wg.Wait()
	if *halted != 0 || n.phase != "training" || n.stopped != "" {
		t.Fatalf("a diverged claim with finite parameters stopped training: halted %d, phase %q, stopped %q", *halted, n.phase, n.stopped)
	}
	if checks != 1 {
		t.Fatalf("checked %d times", checks)
	}
	if n.eval != nil {
		t.Fatalf("an unconfirmed divergence is shown: %+v", n.eval)
	}
}

// TestDivergedClaimSeenHereStops: when the parameters read here show the
// divergence, the worker stops and the node says why.
func TestDivergedClaimSeenHereStops(t *testing.T) {
	n, halted := claimNode(t)
	n.claims.check = func(context.Context) (bool, string, error) { return true, "parameter 3 is NaN", nil }
	n.receiveEval(context.Background(), "a", EvalResult{Accuracy: 0.1, Loss: math.NaN(), Seq: 20, By: "a", Diverged: true})
	n.wg.Wait()
	if *halted != 1 || n.phase != "diverged" || !strings.Contains(n.stopped, "parameter 3 is NaN") || !strings.Contains(n.stopped, "the job diverged") {
		t.Fatalf("halted %d, phase %q, stopped %q", *halted, n.phase, n.stopped)
	}
	t.Logf("stopped: %s", n.stopped)
}
