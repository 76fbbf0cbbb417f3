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
//
// With local rounds (Config.LocalSteps H > 1) an iteration is a round:
// the job's batch × H samples in H steps, or under the balance layer the
// samples the assignment names in steps (w.steps) of about the job's
// batch each, so that a faster worker's larger share is more local steps
// (Dynamic Local Updates), not larger ones.
//
// Under the balance layer with local rounds, a round whose assignment
// carries no predicted time (the balancer has not modelled this worker
// yet: its first rounds, or a joiner's) is a probe: probeSteps steps of
// the job's batch, the first samples of its share, the rest of the share
// unread. The balancer needs a worker's round times before it can size its
// share; a full round at an even share would make every other worker wait
// for the slowest one's whole round, at speeds 1,1,2,4 four times a
// balanced round's length, while a probe takes a few steps. The shard
// replaces the blind allocation once every worker is modelled
// (balance.Balancer.Decide), and the assignments from then carry
// predictions.
//
// Under --local-steps auto the round's steps are the ones the link asks
// for (autosteps.go); under the balance layer too, through the round
// shard 0 sizes from what the workers ask (want). It sets w.h, the round's
// local steps (1 without local rounds).
func (w *Worker) next(t int64) (int, *shardapi.Assignment, error) {
	h := max(w.cfg.LocalSteps, 1)
	if w.cfg.AutoSteps {
		h = w.auto.steps()
	}
	if !w.cfg.Balance {
		w.setSteps(h, nil)
		return w.cfg.Batch * h, nil, w.compute.Next(w.cfg.Batch*h, h, -1)
	}
	b, pos := int64(w.cfg.Batch*h), int64(-1)
	a := w.assignment(t)
	if a != nil && a.Batch > 0 {
		b, pos = a.Batch, a.Pos
	}
	if h > 1 && (a == nil || a.PredictNs <= 0) {
		b = min(b, int64(probeSteps*w.cfg.Batch))
	}
	w.setSteps(w.steps(int(b)), a)
	return int(b), a, w.compute.Next(int(b), w.h, pos)
}

// want is the round the push of a round computed on assignment a asks
// shard 0 for: under --local-steps auto with the balance layer, else 0.
func (w *Worker) want(a *shardapi.Assignment) int64 {
	if !w.cfg.AutoSteps || !w.cfg.Balance || a == nil {
		return 0
	}
	return w.auto.want(w.cfg.Batch, a.Batch, a.Global)
}

// probeSteps is a probe round's local steps: the fewest a round takes
// (steps).
const probeSteps = 2

// setSteps sets w.h and the status's LocalSteps to h (and, under
// --local-steps auto, why: under the balance layer for the share a names,
// kept as it was while no assignment names one).
func (w *Worker) setSteps(h int, a *shardapi.Assignment) {
	w.h = h
	w.mu.Lock()
	w.stats.LocalSteps = h
	switch {
	case !w.cfg.AutoSteps:
	case !w.cfg.Balance:
		w.stats.StepsReason = w.auto.reason
	case a != nil:
		w.stats.StepsReason = w.auto.balancedReason(h, a.Batch, a.Global)
	}
	w.mu.Unlock()
}

// steps is the local steps of a round of n samples: 1 without local
// rounds; with them n / the job's batch, rounded, at least 2 (a push of
// a round carries a pseudo-gradient, Compute's contract) and at most n.
func (w *Worker) steps(n int) int {
	if w.cfg.LocalSteps <= 1 {
		return 1
	}
	return max(1, min(n, max(2, (n+w.cfg.Batch/2)/max(w.cfg.Batch, 1))))
}

// noteAssignmentLocked copies the assignment a completed iteration
// followed into the worker's status. Called by the loop goroutine with
// w.mu held.
func (w *Worker) noteAssignmentLocked(a *shardapi.Assignment, batch int) {
	if !w.cfg.Balance || a == nil {
		return
	}
	w.stats.Batch = int64(batch) // the share, or a probe's part of it
	w.stats.GlobalBatch = a.Global
	w.stats.AllocVersion = a.Version
	w.stats.PredictedSeconds = float64(a.PredictNs) / 1e9
}

// noteEvaluator keeps the evaluation lease shard 0's last OK named (shown
// in the status; the node evaluates while it names this worker).
func (w *Worker) noteEvaluator(id string) {
	w.mu.Lock()
	w.stats.Evaluator = id
	w.mu.Unlock()
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
