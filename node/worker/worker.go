package worker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"dsspmesh/node/records"
)

// New builds a worker; [Worker.Run] runs it.
func New(d Deps, cfg Config) (*Worker, error) {
	if err := cfg.Own.validate(); err != nil {
		return nil, err
	}
	clients, err := newShardClients(d.ID, d.Transport, d.Members, d.Candidates, d.Alive, d.Logger, len(cfg.Bounds), cfg.Precision)
	if err != nil {
		return nil, err
	}
	w := newWorker(d, cfg, clients)
	if th := thetaOf(d.Compute); len(th) == d.Compute.NumParams() {
		w.theta = th // where the compute reads it: no copy per gradient
	} else {
		w.theta = make([]float32, d.Compute.NumParams())
	}
	w.encs[0] = w.newEncoders()
	return w, nil
}

// gradient computes the gradient of the batch loaded on θ and encodes each
// shard's slice as backpropagation forms it (the worker never holds the
// gradient in float32, only its encodings), feeding back the shard's int8
// residual for the shards in push; a shard not in push (it took this
// iteration already) gets an encoding that touches no residual, and is
// not sent. It returns the loss and the encodings, which stay valid until
// this encoder set is used again.
//
// With from > 0 it computes samples from…batch−1 and encodes their
// gradient mixed with w.part, the gradient of samples 0…from−1 computed
// on an older θ (aheadGradient), each weighted by its samples: the mean
// gradient of the batch. The loss returned is that of the samples it
// computed.
//
// A gradient computed while a push is in flight is dropped when that
// push is refused or moves the clocks (Run computes again): its encoding
// has by then moved the residuals as if sent, which leaves the error
// feedback at most one int8 step of each block off, once, per dropped
// gradient, the size of one rounding it exists to cancel.
func (w *Worker) gradient(ctx context.Context, from, batch int, push []bool) (float64, [][]byte, error) {
	encs, bounds := w.encs[w.gi], w.cfg.Bounds
	for s, e := range encs {
		var resid []byte
		if push[s] {
			resid = w.clients[s].residual(bounds[s][1]-bounds[s][0], int64(batch))
		}
		e.Start(resid)
	}
	s := 0
	own, mix := float32(float64(batch-from)/float64(batch)), float32(float64(from)/float64(batch))
	step := w.own != nil && w.h <= 1 // a round carries its change already
	if step {
		w.own.begin(len(w.theta), w.meshSamples())
		defer w.own.end()
	}
	loss, err := w.compute.Gradient(ctx, w.theta, from, batch, func(off int, v []float32) {
		if from > 0 && w.h <= 1 { // a round's second part is the whole round's already (LocalRounds)
			for i, p := range w.part[off : off+len(v)] {
				v[i] = own*v[i] + mix*p
			}
		}
		if step {
			w.own.piece(off, v)
		}
		for end := off + len(v); off < end; {
			for off < bounds[s][0] || off >= bounds[s][1] {
				s = (s + 1) % len(bounds) // pieces come mostly in order: the search is short
			}
			hi := min(end, bounds[s][1])
			encs[s].Put(off-bounds[s][0], v[:hi-off])
			v, off = v[hi-off:], hi
		}
	})
	if err != nil {
		return 0, nil, err
	}
	payloads := make([][]byte, len(encs))
	for s, e := range encs {
		if payloads[s], err = e.Finish(); err != nil {
			return 0, nil, fmt.Errorf("shard %d: %w", s, err)
		}
	}
	return loss, payloads, nil
}

// Run trains until ctx ends or the worker is stopped (a diverging job, its
// own gradients refused, a failure of its own). A worker that stopped
// while ctx was still live leaves every shard's gate before Run returns
// (leaveGates), as [Worker.Leave] does: the node stays up, and its clock
// would otherwise hold every other worker at the staleness bound.
func (w *Worker) Run(ctx context.Context) {
	defer close(w.done)
	parent := ctx
	ctx, halt := context.WithCancel(ctx)
	defer halt()
	defer func() {
		// Runs after the push in flight is done (the deferred wait below).
		if parent.Err() == nil {
			w.leaveGates()
		}
	}()
	w.mu.Lock()
	w.halt = halt
	w.mu.Unlock()
	if err := w.join(ctx); err != nil {
		if ctx.Err() == nil {
			w.fail(fmt.Errorf("join: %w", err))
		}
		return
	}
	var fl *flight // under --pipeline: the push in flight while the next gradient is computed
	defer func() {
		if fl != nil {
			halt()
			<-fl.done // it uses the clients, which Leave closes once Run is done
		}
	}()
	for ctx.Err() == nil {
		// Under --pipeline θ is lent only after a push has settled (below):
		// here, after a refused push or a moved clock, the slices read
		// into θ would also serve the iteration computed ahead of this
		// one's push, for which a read at the gate's t_min of now is one
		// iteration short of the bound (TestInProcessEvaluationBorrowsTheWorkersParameters
		// saw lag 2 under ssp:1).
		if fl == nil && !w.cfg.Pipeline && !w.lendPoint(ctx) {
			return
		}
		var t int64
		if fl != nil {
			// The clocks belong to the push in flight until it is done: not
			// even read here (go test -race caught a slices.Min of them
			// racing with the push's increment).
			t = fl.iter + 1
		} else {
			t = w.step.Next()
		}
		batch, used, err := w.next(t)
		if err != nil {
			w.fail(err)
			return
		}
		w.d.Observer.Computing(w.d.ID, t, w.step.Reads, used.Share())
		push := w.step.Targets(fl != nil)
		ahead := batch // samples computed before the push in flight lands
		if fl != nil {
			// A round of local steps splits at a step boundary (Boundary).
			ahead = Boundary(batch, w.h, aheadOf(w.cfg.PipelineFresh, batch))
		}
		// The job's start: θ₀, no sample applied anywhere yet (the
		// slices' versions say so), the first gradient of this worker.
		atStart := !w.started && w.meshSamples() == 0
		w.started = true
		start := time.Now()
		var (
			loss float64
			grad [][]byte
		)
		if ahead < batch {
			loss, err = w.aheadGradient(ctx, ahead)
		} else {
			loss, grad, err = w.gradient(ctx, 0, batch, push)
		}
		if err != nil {
			if ctx.Err() == nil { // a compute that waits (an external trainer) returns when ctx ends: no failure
				w.fail(err)
			}
			return
		}
		if atStart {
			w.noteStart(ctx, loss)
		}
		compute := time.Since(start)
		waitStart := time.Now()
		if fl != nil {
			prev := fl
			fl = nil
			v, stop := w.settle(ctx, prev, <-prev.done)
			if stop {
				return
			}
			if v != Refused {
				w.completed(prev, time.Since(waitStart))
			}
			if v.DropAhead() {
				// This gradient was computed for prev.iter+1: push prev.iter
				// is to be sent again (refused), or the clocks moved.
				// Compute again for whatever comes next.
				continue
			}
			if !w.lendPoint(ctx) { // no push in flight until the next starts
				return
			}
			if ahead < batch {
				start := time.Now()
				rest, g, err := w.gradient(ctx, ahead, batch, push)
				if err != nil {
					if ctx.Err() == nil {
						w.fail(err)
					}
					return
				}
				grad = g
				loss = (float64(ahead)*loss + float64(batch-ahead)*rest) / float64(batch)
				compute += time.Since(start)
			}
			waitStart = time.Now()
		}
		next := w.newFlight(t, w.theta)
		next.loss, next.compute, next.batch, next.used, next.steps, next.want = loss, compute, batch, used, w.h, w.want(used)
		if w.cfg.Pipeline {
			fl = next
			w.pipelined(ctx, fl, grad)
			continue
		}
		v, stop := w.settle(ctx, next, w.pushAll(ctx, next, grad))
		if stop {
			return
		}
		if v != Refused {
			w.completed(next, time.Since(waitStart))
		}
	}
}

// settle lands fl's push, whose pushAll returned err, and does what
// Step.Settle decides: count a refusal, fail, or align a moved clock. stop
// when the worker is done (ctx ended, a rejection it cannot repair, an
// align that failed).
func (w *Worker) settle(ctx context.Context, fl *flight, err error) (v Verdict, stop bool) {
	w.land(fl)
	st := w.step.Settle(fl.iter, err, ctx.Err() != nil)
	v = st.Verdict
	if st.Refused != nil {
		w.refused(st.Refused)
	}
	switch v {
	case Stop:
		if st.Err != nil {
			w.fail(st.Err)
		}
		return v, true
	case Moved:
		if w.step.NeedAlign() {
			if err := w.align(ctx, false); err != nil {
				return v, true
			}
		}
		w.step.MarkMoved(fl.iter)
	}
	return v, false
}

// refused counts and logs a gradient the shards refused.
func (w *Worker) refused(err error) {
	w.d.Metrics.Refused.Inc()
	w.mu.Lock()
	w.stats.Refused++
	w.stats.LastError = err.Error()
	w.mu.Unlock()
	// Logged at debug: each shard's refusal is an event, which the event
	// log logs at warn, paced per reason (node/status.EventLog.LogTo).
	w.d.Logger.Debug("gradient refused; computing another for the same iteration", "err", err)
}

// Stop halts the worker loop for good with reason, shown on /status; the
// node keeps serving its shards.
func (w *Worker) Stop(reason string) {
	w.mu.Lock()
	halt, already := w.halt, w.stats.Stopped != ""
	if !already {
		w.stats.Stopped = reason
	}
	w.mu.Unlock()
	if already {
		return
	}
	w.d.Logger.Error("worker stopped", "reason", reason)
	if halt != nil {
		halt()
	}
}

// completed counts fl's round, which waited wait for its push, and under
// --local-steps auto chooses the next round's steps from it.
func (w *Worker) completed(fl *flight, wait time.Duration) {
	loss, compute, batch, used := fl.loss, fl.compute, fl.batch, fl.used
	if w.cfg.AutoSteps {
		w.auto.observe(fl.steps, compute, slices.Max(fl.wire))
	}
	now := time.Now()
	if w.stats.Iter == 0 { // written by this goroutine alone
		w.firstRound(now)
	}
	w.d.Metrics.Iterations.Inc()
	w.d.Metrics.Samples.Add(float64(batch))
	w.d.Metrics.ComputeSec.Add(compute.Seconds())
	w.d.Metrics.WaitSec.Add(wait.Seconds())
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stats.Iter++
	w.stats.Samples += uint64(batch)
	w.noteAssignmentLocked(used, batch)
	w.stats.Loss = loss
	w.stats.ComputeSeconds += compute.Seconds()
	w.stats.WaitSeconds += wait.Seconds()
	w.stats.LastError = ""
	w.rate = append(w.rate, now)
	for len(w.rate) > 2 && now.Sub(w.rate[0]) > 5*time.Second {
		w.rate = w.rate[1:]
	}
	if len(w.rate) > 1 {
		w.stats.ItersPerSec = float64(len(w.rate)-1) / now.Sub(w.rate[0]).Seconds()
	}
}

// firstRound records, at now, that the worker's first round was
// acknowledged by every shard: an event of kind heal and an INFO line.
func (w *Worker) firstRound(now time.Time) {
	detail := "training: the first round acknowledged by every shard"
	if !w.d.Started.IsZero() {
		took := now.Sub(w.d.Started).Round(time.Millisecond)
		detail += fmt.Sprintf(", %s after the node started", took)
	}
	w.d.Logger.Info("heal: " + detail)
	w.d.Event(records.Event{Kind: records.EventHeal, Node: string(w.d.ID), Detail: detail})
}

// Leave waits for Run to return (its ctx cancelled), then removes this
// worker from every shard so it stops holding others back at once, rather
// than after failure detection, and closes the shard clients. A worker
// that stopped itself has left the gates already (Run): Leave only closes
// the clients.
func (w *Worker) Leave(limit time.Duration) {
	<-w.done
	defer func() {
		for _, c := range w.clients {
			c.close()
		}
	}()
	if w.left {
		return
	}
	if err := w.removeEverywhere(limit); err != nil {
		w.d.Logger.Debug("remove worker on leave", "err", err)
	}
}

// leaveGates takes a worker that stopped itself out of every shard's
// gate, the way a leaving one goes (Leave), so the others train on; the
// node keeps running and serving its shards. Called by Run alone, before
// done closes.
func (w *Worker) leaveGates() {
	w.left = true
	w.mu.Lock()
	reason := w.stats.Stopped
	w.mu.Unlock()
	if err := w.removeEverywhere(w.cfg.leaveTimeout()); err != nil {
		w.d.Logger.Warn("stopped worker: leaving the shards' gates", "reason", reason, "err", err)
		return
	}
	w.d.Logger.Info("stopped worker left the shards' gates; the others train on", "reason", reason)
}

// removeEverywhere removes this worker from every shard at once, within
// limit; its error joins the shards' (a shard that never had the worker
// answers nil).
func (w *Worker) removeEverywhere(limit time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	errs := make([]error, len(w.clients))
	var wg sync.WaitGroup
	for s, c := range w.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.removeWorker(ctx); err != nil {
				errs[s] = fmt.Errorf("shard %d: %w", s, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// meshSamples is the newest count of samples applied mesh-wide that an OK
// brought (the highest over θ's slices): the schedule's input.
func (w *Worker) meshSamples() int64 {
	var n int64
	for _, r := range w.step.Reads {
		n = max(n, r.Samples)
	}
	return n
}

// noteStart records the job's loss at its start (records.LocalWorker's
// StartLoss) once the worker computed the job's first iteration on θ₀:
// that iteration's loss, or where it is none (0, not finite) what the
// compute's StartLoss measures.
func (w *Worker) noteStart(ctx context.Context, loss float64) {
	if !(loss > 0) || math.IsInf(loss, 0) {
		loss = 0
		if s, ok := unwrapTo[StartLoss](w.compute); ok {
			if l, ok := s.StartLoss(ctx, w.theta); ok && l > 0 && !math.IsInf(l, 0) {
				loss = l
			}
		}
	}
	w.mu.Lock()
	w.stats.StartLoss = loss
	w.mu.Unlock()
}
