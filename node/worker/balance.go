package worker

import "dsspmesh/shardapi"

// The worker's side of the balance layer (docs/design.md#balance). With
// Config.Balance (the job's --balance), shard 0's OK reply to push t carries the worker's
// assignment for iteration t+1 and, under --pipeline, for t+2 (each
// naming its iteration): the batch size and the position of its slice in
// the job-wide data order (cudaops.Order, one seeded permutation of the
// training set per epoch). The loop keeps the two of the last OK it
// landed (w.assigned, pipeline.go) and computes iteration t on the one
// named for t. Without one (the first iteration, a joiner not in the
// allocation in force) it computes the job's batch from a position of its
// own.

// next loads (Compute.Next) iteration t's mini-batch and returns
// its size and the assignment it follows (nil for none): the one shard 0
// named for t under the balance layer, else the job's batch from the
// worker's own loader or, under the balance layer without an assignment
// for t, from a position of its own.
func (w *Worker) next(t int64) (int, *shardapi.Assignment, error) {
	if !w.cfg.Balance {
		return w.cfg.Batch, nil, w.compute.Next(w.cfg.Batch, -1)
	}
	b, pos := int64(w.cfg.Batch), int64(-1)
	a := w.assignment(t)
	if a != nil && a.Batch > 0 {
		b, pos = a.Batch, a.Pos
	}
	return int(b), a, w.compute.Next(int(b), pos)
}

// noteAssignmentLocked copies the assignment a completed iteration
// followed into the worker's status. Called by the loop goroutine with
// w.mu held.
func (w *Worker) noteAssignmentLocked(a *shardapi.Assignment) {
	if !w.cfg.Balance || a == nil {
		return
	}
	w.stats.Batch = a.Batch
	w.stats.GlobalBatch = a.Global
	w.stats.AllocVersion = a.Version
	w.stats.PredictedSeconds = float64(a.PredictNs) / 1e9
}

// assignment is the assignment named for iteration t by one of the last
// two OKs of shard 0 the loop landed, nil if none names it. Any two that
// name t are equal: an assignment is final when named (shard/balance.go).
func (w *Worker) assignment(t int64) *shardapi.Assignment {
	for _, a := range w.assigned {
		if a != nil && a.Iter == t {
			return a
		}
	}
	return nil
}
