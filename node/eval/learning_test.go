package eval

import (
	"math"
	"strings"
	"testing"

	"dsspmesh/node/records"
)

// TestLearningCheck: a job whose loss stays at its start is flagged at its
// third evaluation; one whose loss climbs away from its best is flagged as
// diverging; a learning job, a converged one (flat, far below its start)
// and one with too few evaluations are not.
func TestLearningCheck(t *testing.T) {
	evals := func(pairs ...float64) []records.EvalResult {
		var out []records.EvalResult
		for i := 0; i < len(pairs); i += 2 {
			out = append(out, records.EvalResult{Loss: pairs[i], Accuracy: pairs[i+1]})
		}
		return out
	}
	for _, c := range []struct {
		name  string
		evals []records.EvalResult
		want  string
	}{
		{"too early", evals(2.30, 0.11, 2.30, 0.11), ""},
		{"collapsed at chance from the start", evals(2.3026, 0.1135, 2.3025, 0.1135, 2.3026, 0.1135), "not learning: training loss 2.31 at its start, test loss 2.303 at its last evaluation (3 evaluations), accuracy 11.35% → 11.35%"},
		{"blown up and falling back to chance", evals(4.84, 0.103, 2.72, 0.099, 2.68, 0.116, 2.52, 0.099), "not learning"},
		{"an unstable rate: loss above the start, accuracy wandering", evals(12.79, 0.132, 10.85, 0.228, 6.67, 0.107), "not learning"},
		{"a loss at its start but an accuracy well up", evals(2.35, 0.10, 2.33, 0.15, 2.32, 0.25), ""},
		{"learning", evals(2.1, 0.3, 0.9, 0.7, 0.5, 0.85), ""},
		{"slow but learning", evals(2.30, 0.10, 2.20, 0.20, 2.10, 0.25), ""},
		{"converged", evals(2.0, 0.4, 0.12, 0.965, 0.11, 0.97, 0.11, 0.97, 0.11, 0.971), ""},
		{"diverging", evals(1.5, 0.6, 0.4, 0.88, 0.35, 0.9, 0.9, 0.7, 1.2, 0.6), "diverging: test loss 0.9 and 1.2 at its last two evaluations, 0.35 at its best (accuracy 60.00% now)"},
		{"one bad evaluation is not divergence", evals(1.5, 0.6, 0.4, 0.88, 0.9, 0.7, 0.38, 0.89), ""},
	} {
		if got := Learning(c.evals, 2.31); (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	// A model that learnt before its first evaluation (a fast CNN at 97 %
	// by then) stays where it got: not flat against its start, the first
	// iteration's training loss.
	trained := evals(0.086, 0.9733, 0.087, 0.9731, 0.0887, 0.9727)
	if got := Learning(trained, 2.30); got != "" {
		t.Errorf("a model trained before its first evaluation: %q", got)
	}
	// Without the start (a node that trains no worker) nothing is flat;
	// divergence is still told.
	if got := Learning(evals(2.3026, 0.1135, 2.3025, 0.1135, 2.3026, 0.1135), math.NaN()); got != "" {
		t.Errorf("flat without a start: %q", got)
	}
	if got := Learning(evals(1.5, 0.6, 0.4, 0.88, 0.35, 0.9, 0.9, 0.7, 1.2, 0.6), math.NaN()); !strings.Contains(got, "diverging") {
		t.Errorf("divergence without a start: %q", got)
	}
}
