package node

import (
	"dsspmesh/node/records"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"
)

// TestDivergedEvaluationStopsTheWorker: a non-finite loss at evaluation
// stops this node's worker with a message that says so, once, and the
// node's phase says it diverged (the claims' judgement is node/eval's,
// claims_test.go).
func TestDivergedEvaluationStopsTheWorker(t *testing.T) {
	n := &Node{now: time.Now, log: slog.New(slog.DiscardHandler), phase: "training"}
	n.claims = n.newClaims()
	halted := 0
	n.worker = &stopWorker{halted: &halted}
	n.claims.Set(records.EvalResult{Accuracy: 0.9, Seq: 10, By: "a"})
	if st := n.worker.Status(); st.Stopped != "" || halted != 0 {
		t.Fatalf("a finite evaluation stopped the worker: %q", st.Stopped)
	}
	e := records.EvalResult{Accuracy: 0.1, Loss: math.NaN(), Seq: 20, By: "a", Diverged: true}
	n.claims.Set(e)
	n.claims.Set(e)
	st := n.worker.Status()
	if halted != 1 || !strings.Contains(st.Stopped, "the job diverged") || !strings.Contains(st.Stopped, "smaller --lr") {
		t.Fatalf("halted %d times, stopped: %q", halted, st.Stopped)
	}
	if n.phase != "diverged" || n.stopped != st.Stopped {
		t.Fatalf("phase %q, stopped %q", n.phase, n.stopped)
	}
	t.Logf("stopped: %s", st.Stopped)
}

// stopWorker is a worker that only stops.
type stopWorker struct {
	workerLoop
	halted  *int
	stopped string
}

func (w *stopWorker) Stop(reason string) {
	if w.stopped == "" {
		w.stopped = reason
		*w.halted++
	}
}

func (w *stopWorker) Status() *records.LocalWorker { return &records.LocalWorker{Stopped: w.stopped} }
