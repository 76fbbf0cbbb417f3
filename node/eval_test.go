package node

import (
	"testing"
	"time"
)

// TestEvalOrderedBySequenceNotClock: an evaluation from a peer whose clock
// runs an hour ahead does not freeze the one shown; a newer state of the
// parameters (larger Seq) replaces it whatever its time says.
func TestEvalOrderedBySequenceNotClock(t *testing.T) {
	n := &Node{}
	now := time.Unix(1000, 0)
	n.setEval(EvalResult{Accuracy: 0.5, Seq: 100, At: now, By: "a"})
	n.setEval(EvalResult{Accuracy: 0.4, Seq: 50, At: now.Add(time.Hour), By: "fast-clock"})
	if n.eval.By != "a" {
		t.Fatalf("an older state with a later clock won: %+v", n.eval)
	}
	n.setEval(EvalResult{Accuracy: 0.6, Seq: 150, At: now.Add(-time.Hour), By: "slow-clock"})
	if n.eval.By != "slow-clock" || n.eval.Accuracy != 0.6 {
		t.Fatalf("a newer state with an earlier clock lost: %+v", n.eval)
	}
	if len(n.evals) != 2 {
		t.Fatalf("history %d", len(n.evals))
	}
}
