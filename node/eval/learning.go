package eval

import (
	"fmt"
	"math"

	"dsspmesh/node/records"
)

// The learning check: a job whose test loss stays at its start, or climbs
// away from its best, is not learning, and says so — on /status (a
// warning), the dashboard, `dssp up`, and in one WARN line — instead of
// training on for its whole time limit. It reads the evaluations a node
// holds (every node holds the mesh's), so every node judges alike.
//
//   - flat: the last LearningWindow evaluations all have a test loss at
//     least flatRatio of the job's loss at its start — measured at θ₀ by
//     the workers that computed its first iteration — and the last an
//     accuracy less than flatAccuracy above
//     the first evaluation's: nothing learnt since the start. A model that
//     learnt before its first evaluation is not flat for staying where it
//     got; a collapsed model (one class predicted, the loss at chance, or a
//     loss that blew up and is falling back towards chance) is flat; a
//     converged job never is, its loss being far below its start. A node
//     that has not seen the start (it trains no worker, or its worker
//     joined after it) judges no flatness.
//   - diverging: the last two evaluations' losses are both above
//     divergeRatio times the lowest loss before them.
//
// A non-finite loss is the diverged state that stops every worker
// (ClaimDeps.Diverged), not a warning.
const (
	LearningWindow = 3
	flatRatio      = 0.97
	flatAccuracy   = 0.10
	divergeRatio   = 1.5
)

// Learning judges evals (oldest first) against start, the training loss
// of the job's first iteration (NaN: unknown): "" while the job learns or
// it is too early to tell, else what is wrong, with the figures.
func Learning(evals []records.EvalResult, start float64) string {
	n := len(evals)
	if n < LearningWindow {
		return ""
	}
	first, last := evals[0], evals[n-1]
	flat := start > 0 && !math.IsInf(start, 0) // NaN: no start seen
	for _, e := range evals[n-LearningWindow:] {
		if !(e.Loss >= flatRatio*start) {
			flat = false
		}
	}
	if last.Accuracy >= first.Accuracy+flatAccuracy {
		flat = false
	}
	if flat {
		return fmt.Sprintf("the job is not learning: training loss %.4g at its start, test loss %.4g at its last evaluation (%d evaluations), accuracy %.2f%% → %.2f%%",
			start, last.Loss, n, 100*first.Accuracy, 100*last.Accuracy)
	}
	best := math.Inf(1)
	for _, e := range evals[:n-2] {
		best = min(best, e.Loss)
	}
	if evals[n-2].Loss > divergeRatio*best && last.Loss > divergeRatio*best {
		return fmt.Sprintf("the job is diverging: test loss %.4g and %.4g at its last two evaluations, %.4g at its best (accuracy %.2f%% now)",
			evals[n-2].Loss, last.Loss, best, 100*last.Accuracy)
	}
	return ""
}
