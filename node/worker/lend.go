package worker

import (
	"context"

	"dsspmesh/node/records"
	"dsspmesh/shardapi"
)

// Lending θ to the evaluation (node/eval.go). An evaluation reads the whole
// model into memory of its own and evaluates it there, beside the worker's
// θ: for a model of at least a size the node chooses that second copy is what decides
// the evaluating node's peak memory (a 100 MB model's evaluator held 7× the
// model where the others held 6×). So for such a model the evaluation
// borrows the worker's θ instead: at the top of an iteration, with no push
// in flight, the worker hands θ over and waits; the evaluation reads the
// model into it, evaluates, saves its checkpoint and hands θ back with the
// version of every slice it read, which the worker then computes on as if
// a push's OK had brought them — a linearizable read after its last OK is
// at least as fresh as that OK (docs/design.md, "The read guarantee"),
// and a slice last read outside the gate stays marked so. A shard whose
// read failed keeps its old version: its values are that
// version's or newer ones. The worker computes nothing while θ is lent;
// the evaluation computes in its place. The evaluated snapshot, for
// GET /model.safetensors?evaluated, is written to the data dir
//  before θ goes back: a model's bytes more on disk, none
// in memory.

// lendRequest is the evaluation asking for θ: the loop sends θ on theta,
// then waits on back for the versions read into it (nil for a shard whose
// read failed).
type lendRequest struct {
	theta chan<- []float32
	back  <-chan []*shardapi.Version
}

// lendPoint hands θ to an evaluation that asks for it and waits for it
// back; false if ctx ended meanwhile (the worker stops). The loop calls it
// where it owns θ and no push is in flight: at the top of a lock-step
// iteration, and under --pipeline once a push settled with an OK, before
// the next goes out (Run says why not at the top).
func (w *Worker) lendPoint(ctx context.Context) bool {
	select {
	case req := <-w.lends:
		req.theta <- w.theta
		select {
		case got := <-req.back:
			for s, v := range got {
				if v != nil {
					// A read made after one outside the gate (join's fetch,
					// a moved clock) is as far outside: no OK waited for the
					// bound since.
					w.step.Reads[s] = records.SliceRead{Version: *v, Unchecked: w.step.Reads[s].Unchecked}
				}
			}
		case <-ctx.Done():
			return false
		}
	default:
	}
	return true
}

// Borrow asks the worker loop for θ, waiting until it reaches a lend
// point, ctx ends or the loop is done (false); giveBack returns θ with the
// version each shard's slice now has (nil: unchanged). Call giveBack
// exactly once after a true.
func (w *Worker) Borrow(ctx context.Context) (theta []float32, giveBack func([]*shardapi.Version), ok bool) {
	got := make(chan []float32, 1)
	back := make(chan []*shardapi.Version, 1)
	select {
	case w.lends <- lendRequest{theta: got, back: back}:
	case <-ctx.Done():
		return nil, nil, false
	case <-w.done:
		return nil, nil, false
	}
	return <-got, func(v []*shardapi.Version) { back <- v }, true
}

// Finished reports whether the loop has returned (a stopped worker lends
// nothing; the evaluation then reads into memory of its own).
func (w *Worker) Finished() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}
