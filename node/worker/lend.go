package worker

import (
	"context"

	"dsspmesh/shardapi"
)

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
					w.step.lent(s, *v)
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
