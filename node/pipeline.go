package node

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"dsspmesh/shardapi"
)

// The pipelined loop (JobSpec.Pipeline; docs/design.md, "The read
// guarantee"): the worker sends the push of iteration t and, without
// waiting for it, computes iteration t+1 on θ as the OK of push t−1 left
// it; then it waits for push t, writes the slices it brought into θ, sends
// t+1 and computes t+2. The shards' gate releases one iteration earlier
// for it (clock.Policy.Pipelined: s_L − 1), so the slices of t+1 still
// hold every worker's updates below t+1 − s_U (t+1 − s_L unless a grant
// released them); what they lack is the worker's own update of t, in
// flight.
//
// Ownership while a push is in flight: its goroutines own w.iters, the
// clients and the flight (its landing buffer w.landing, its reads, got
// and assign); the loop owns θ, w.reads and w.assigned, which the flight
// does not write, and the encoder set it encodes the next gradient into
// (the push sends the other set's bytes). The loop reads the flight's results
// only after receiving from fl.done. With no push in flight (join, the
// lock-step loop, after a refusal or a moved clock) pushAll decodes
// straight into θ on the loop's behalf.
//
// With JobSpec.PipelineFresh > 0 only the first samples of iteration t+1
// are computed while push t is in flight (aheadGradient, into w.part); the
// rest waits for push t to land and is computed on the θ it brought, and
// the two gradients are mixed by their samples before encoding (gradient).
// The read the checkers see is the older one, taken before the first part;
// the second part's is fresher. In simulation a fresh half needs the
// lock-step loop's samples to 95% and a whole batch ahead 1.33–1.36× them
// (docs/design.md, the pipelined loop).
//
// What the balance layer needs: shard 0's OK to push t names the
// assignments of t+1 and (under Pipeline) t+2, both final when named
// (shard/balance.go), so iteration t+1, computed while push t is in
// flight, takes the one named by the OK of t−1.

// flight is one pushAll of iteration iter: what it carries and where its
// replies go.
type flight struct {
	iter    int64
	loss    float64
	compute time.Duration
	batch   int
	used    *shardapi.Assignment // the assignment the gradient was computed on, if any

	into   []float32               // θ (no push in flight) or w.landing (pipelined)
	apart  bool                    // into is w.landing: land copies the slices into θ
	reads  []SliceRead             // per shard: the version of the slice written into into
	got    []bool                  // per shard: a slice was written (not kept)
	assign [2]*shardapi.Assignment // shard 0's last OK: for iter+1 and iter+2
	done   chan error              // pipelined: pushAll's result
}

// newFlight is a push of iteration iter whose slices go into into.
func (w *worker) newFlight(iter int64, into []float32) *flight {
	return &flight{iter: iter, into: into, reads: make([]SliceRead, len(w.clients)), got: make([]bool, len(w.clients))}
}

// aheadOf is how many samples of a batch the loop computes while the push
// before it is in flight: all but JobSpec.PipelineFresh of them, at least
// one on each side (a batch of one goes whole).
func (w *worker) aheadOf(batch int) int {
	fresh := int(math.Round(w.spec.PipelineFresh * float64(batch)))
	if fresh <= 0 || batch < 2 {
		return batch
	}
	return min(max(batch-fresh, 1), batch-1)
}

// aheadGradient computes the gradient of the first k samples of w.x on θ
// into w.part (made at the first call) for gradient to mix in once the push
// in flight has landed, and returns their loss.
func (w *worker) aheadGradient(k int) (float64, error) {
	if w.part == nil {
		w.part = make([]float32, len(w.theta))
	}
	return w.n.model.Gradient(w.theta, w.x[:k*w.n.model.InputSize()], w.labels[:k], w.part)
}

// pipelined starts fl's push of grad and returns at once; the result
// arrives on fl.done. The slices go into w.landing (model-sized), and the
// next gradient's encodings into the other encoder set (both made at the
// first pipelined push: a job without --pipeline never holds them).
func (w *worker) pipelined(ctx context.Context, fl *flight, grad [][]byte) {
	if w.landing == nil {
		w.landing = make([]float32, len(w.theta))
	}
	fl.into, fl.apart = w.landing, true
	fl.done = make(chan error, 1)
	go func() { fl.done <- w.pushAll(ctx, fl, grad) }()
	w.gi ^= 1
	if w.encs[w.gi] == nil {
		w.encs[w.gi] = w.newEncoders()
	}
}

// land writes what fl's push brought into the loop's state: each pulled
// slice into θ (when it went to the landing buffer) with its version, and
// shard 0's assignments. The loop calls it once fl's push returned.
func (w *worker) land(fl *flight) {
	for s, got := range fl.got {
		if !got {
			continue
		}
		if lo, hi := w.bounds[s][0], w.bounds[s][1]; fl.apart {
			copy(w.theta[lo:hi], fl.into[lo:hi])
		}
		w.reads[s] = fl.reads[s]
	}
	if fl.assign[0] != nil {
		// The previous OK's are kept too: after a refused push the loop
		// computes that iteration again, which only an older OK named.
		w.assigned = [4]*shardapi.Assignment{w.assigned[2], w.assigned[3], fl.assign[0], fl.assign[1]}
	}
}

// assignment is the assignment named for iteration t by one of the last
// two OKs of shard 0 the loop landed, nil if none names it. Any two that
// name t are equal: an assignment is final when named (shard/balance.go).
func (w *worker) assignment(t int64) *shardapi.Assignment {
	for _, a := range w.assigned {
		if a != nil && a.Iter == t {
			return a
		}
	}
	return nil
}

// settle lands fl's push, whose pushAll returned err, and says how it
// went: ok when every shard took it; moved when the clocks are then not all
// fl.iter+1 (a shard re-added the worker higher; align has made them equal
// again, and the slices read for a lower clock are marked unchecked); stop
// when the worker is done (ctx ended, or a rejection it cannot repair).
func (w *worker) settle(ctx context.Context, fl *flight, err error, inARow *int) (ok, moved, stop bool) {
	w.land(fl)
	if err != nil {
		if ctx.Err() != nil {
			return false, false, true
		}
		if refusedGradient(err) {
			// Nothing was applied where it was refused: compute a fresh
			// gradient and send the same iteration again to the shards
			// that refused it (pushAll skips the others).
			*inARow++
			w.refused(err)
			if *inARow < maxRefusedInARow {
				return false, false, false
			}
			err = fmt.Errorf("%d gradients in a row refused (a broken device or a diverging job): %w", *inARow, err)
		}
		// A rejection the worker cannot repair: stopping loudly beats a
		// worker that silently holds every other one at the staleness
		// bound.
		w.fail(err)
		return false, false, true
	}
	*inARow = 0
	if slices.Min(w.iters) == fl.iter+1 && slices.Max(w.iters) == fl.iter+1 {
		return true, false, false
	}
	if slices.Min(w.iters) != slices.Max(w.iters) {
		if err := w.align(ctx, false); err != nil {
			return false, false, true
		}
	}
	for s := range w.iters {
		// Read for a lower clock than the next iteration's.
		w.reads[s].Unchecked = w.reads[s].Unchecked || w.iters[s] != fl.iter+1
	}
	return true, true, false
}
