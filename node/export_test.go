package node

import (
	"log/slog"

	"dsspmesh/mesh"
	"dsspmesh/node/eval"
	"dsspmesh/node/job"
	"dsspmesh/node/worker"
	"dsspmesh/shardapi"
)

// SetEvalLendBytes sets the model size from which an evaluation borrows
// the worker's θ (node/worker/lend.go) for the external tests, and returns the undo.
func SetEvalLendBytes(n int) (restore func()) {
	old := eval.LendBytes
	eval.LendBytes = n
	return func() { eval.LendBytes = old }
}

// PushWorker is a worker with only its push path (worker.PushOnly).
type PushWorker = worker.PushOnly

// NewPushWorker returns a worker named id pushing through clients.
func NewPushWorker(log *slog.Logger, id mesh.NodeID, _ mesh.Transport, spec job.Spec, bounds [][2]int, clients []*shardapi.Client) *PushWorker {
	return worker.NewPushOnly(log, id, spec.Precision(), bounds, clients)
}
