package worker

import "context"

// The pipelined loop (Config.Pipeline, the job's --pipeline; docs/design.md, "The read
// guarantee"): the worker sends the push of iteration t and, without
// waiting for it, computes iteration t+1 on θ as the OK of push t−1 left
// it; then it waits for push t, writes the slices it brought into θ, sends
// t+1 and computes t+2. The shards' gate releases one iteration earlier
// for it (clock.Policy.Pipelined: s_L − 1), so the slices of t+1 still
// hold every worker's updates below t+1 − s_U (t+1 − s_L unless a grant
// released them); what they lack is the worker's own update of t, in
// flight.
//
// Ownership while a push is in flight: its goroutines own the clocks
// (w.step.Iters), the clients and the flight (its landing buffer
// w.landing, its reads, got and assign); the loop owns θ, the versions
// (w.step.Reads) and w.assigned, which the flight does not write, and the
// encoder set it encodes the next gradient into (the push sends the other
// set's bytes). The loop reads the flight's results only after receiving
// from fl.done. With no push in flight (join, the
// lock-step loop, after a refusal or a moved clock) pushAll decodes
// straight into θ on the loop's behalf.
//
// With Config.PipelineFresh > 0 only the first samples of iteration t+1
// are computed while push t is in flight (aheadGradient, into w.part); the
// rest waits for push t to land and is computed on the θ it brought, and
// the two gradients are mixed by their samples before encoding (gradient).
// The read the checkers see is the older one, taken before the first part;
// the second part's is fresher. In simulation a fresh half needs the
// lock-step loop's samples to 95% and a whole batch ahead 1.33–1.36× them
// (docs/design.md, the pipelined loop).
//
// A round of local steps (LocalRounds) splits at a step boundary
// (Boundary): its first steps run from the θ before the push in flight
// lands, the rest from the θ it brought with the first steps' progress
// carried over, and the second part's pseudo-gradient is the whole
// round's, not mixed with the first (gradient, Worker.h).
//
// What the balance layer needs: shard 0's OK to push t names the
// assignments of t+1 and (under Pipeline) t+2, both final when named
// (shard/balance.go), so iteration t+1, computed while push t is in
// flight, takes the one named by the OK of t−1.

// aheadGradient computes the gradient of the first k samples of the batch on θ
// into w.part (made at the first call) for gradient to mix in once the push
// in flight has landed, and returns their loss.
func (w *Worker) aheadGradient(ctx context.Context, k int) (float64, error) {
	if w.part == nil {
		w.part = make([]float32, len(w.theta))
	}
	return w.compute.Gradient(ctx, w.theta, 0, k, func(off int, v []float32) { copy(w.part[off:], v) })
}

// pipelined starts fl's push of grad and returns at once; the result
// arrives on fl.done. The slices go into w.landing (model-sized), and the
// next gradient's encodings into the other encoder set (both made at the
// first pipelined push: a job without --pipeline never holds them).
func (w *Worker) pipelined(ctx context.Context, fl *flight, grad [][]byte) {
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
