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
//   - flat: the last LearningWindow evaluations (the first of the run
//     among them while the run has no more) all have a loss at least
//     flatRatio of the first evaluation's and an accuracy at most
//     flatAccuracy above it: nothing learnt since the start. A collapsed
//     model (one class predicted, the loss at chance) is flat from its
//     first evaluation on; a converged job is never flat, its loss being
//     far below its first.
//   - diverging: the last two evaluations' losses are both above
//     divergeRatio times the lowest loss before them.
//
// A non-finite loss is the diverged state that stops every worker
// (ClaimDeps.Diverged), not a warning.
const (
	LearningWindow = 3
	flatRatio      = 0.97
	flatAccuracy   = 0.02
	divergeRatio   = 1.5
)

// Learning judges evals (oldest first): "" while the job learns or it is
// too early to tell, else what is wrong, with the figures.
func Learning(evals []records.EvalResult) string {
	n := len(evals)
	if n < LearningWindow {
		return ""
	}
	first, last := evals[0], evals[n-1]
	flat := true
	for _, e := range evals[n-LearningWindow:] {
		if !(e.Loss >= flatRatio*first.Loss) || e.Accuracy > first.Accuracy+flatAccuracy {
			flat = false
		}
	}
	if flat {
		return fmt.Sprintf("the job is not learning: test loss %.4g at its first evaluation, %.4g at its last (%d evaluations), accuracy %.2f%% → %.2f%%",
			first.Loss, last.Loss, n, 100*first.Accuracy, 100*last.Accuracy)
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
