package shard

import (
	"testing"

	"dsspmesh/clock"
)

// TestEvaluationLease: shard 0's lease names the lowest id among the
// workers with a push applied — not a worker that only joined — and moves
// at once when its holder leaves the gate; a snapshot restores it (it is
// the gate's own state).
func TestEvaluationLease(t *testing.T) {
	spec := testSpec(2, "asp")
	spec.Shard = 0
	h := newFSMHarness(t, spec, []float32{0, 0})
	lease := func() string { return h.f.Status().Evaluator }
	for _, w := range []clock.WorkerID{"a", "b", "c"} {
		h.apply(encodeWorker(entryAddWorker, w, 0))
	}
	if got := lease(); got != "" {
		t.Fatalf("with no push applied the lease names %q", got)
	}
	push := func(w clock.WorkerID, iter int64) {
		t.Helper()
		if a := h.apply(encodePushes([]Push{{PushMeta: meta(w, iter, 4), Grad: gradBytes([]float32{1, 1})}})); !a.Pushes[0].Applied {
			t.Fatalf("push %s %d: %+v", w, iter, a.Pushes[0])
		}
	}
	push("c", 0)
	if got := lease(); got != "c" {
		t.Fatalf("after c's push the lease names %q, want c", got)
	}
	push("b", 0)
	if got := lease(); got != "b" {
		t.Fatalf("after b's push the lease names %q, want b (a has joined but not pushed)", got)
	}
	h.apply(encodeWorker(entryRemoveWorker, "b", 0))
	if got := lease(); got != "c" {
		t.Fatalf("b removed: the lease names %q, want c", got)
	}
	h.apply(encodeWorker(entryAddWorker, "b", 0)) // back, but it has not pushed since
	if got := lease(); got != "c" {
		t.Fatalf("b re-added without a push: the lease names %q, want c", got)
	}
	if got := restored(t, snapshotBytes(t, h.f)).Status().Evaluator; got != "c" {
		t.Fatalf("restored: the lease names %q, want c", got)
	}
}
