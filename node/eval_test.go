package node

import (
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"
)

// TestEvalOrderedBySequenceNotClock: an evaluation whose clock runs an
// hour ahead does not freeze the one shown; a newer state of the
// parameters (larger Seq) replaces it whatever its time says.
func TestEvalOrderedBySequenceNotClock(t *testing.T) {
	n := &Node{now: time.Now}
	now := time.Unix(1000, 0)
	n.setEval(EvalResult{Accuracy: 0.5, Seq: 100, At: now, By: "a"})
	n.setEval(EvalResult{Accuracy: 0.4, Seq: 50, At: now.Add(time.Hour), By: "a"})
	if n.eval.Accuracy != 0.5 {
		t.Fatalf("an older state with a later clock won: %+v", n.eval)
	}
	n.setEval(EvalResult{Accuracy: 0.6, Seq: 150, At: now.Add(-time.Hour), By: "a"})
	if n.eval.Accuracy != 0.6 {
		t.Fatalf("a newer state with an earlier clock lost: %+v", n.eval)
	}
	if len(n.evals) != 2 {
		t.Fatalf("history %d", len(n.evals))
	}
}

// TestDivergedEvaluationStopsTheWorker: a non-finite loss at evaluation
// stops this node's worker with a message that says so, once.
func TestDivergedEvaluationStopsTheWorker(t *testing.T) {
	n := &Node{now: time.Now, log: slog.New(slog.DiscardHandler)}
	halted := 0
	n.worker = &stopWorker{halted: &halted}
	n.setEval(EvalResult{Accuracy: 0.9, Seq: 10, By: "a"})
	if st := n.worker.Status(); st.Stopped != "" || halted != 0 {
		t.Fatalf("a finite evaluation stopped the worker: %q", st.Stopped)
	}
	e := EvalResult{Accuracy: 0.1, Loss: math.NaN(), Seq: 20, By: "a", Diverged: true}
	n.setEval(e)
	n.setEval(e)
	st := n.worker.Status()
	if halted != 1 || !strings.Contains(st.Stopped, "the job diverged") || !strings.Contains(st.Stopped, "smaller --lr") {
		t.Fatalf("halted %d times, stopped: %q", halted, st.Stopped)
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

func (w *stopWorker) Status() *LocalWorker { return &LocalWorker{Stopped: w.stopped} }
