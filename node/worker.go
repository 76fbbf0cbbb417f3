package node

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"sync"
	"time"

	"dsspmesh/clock"
	"dsspmesh/cudaops"
	"dsspmesh/mesh"
	"dsspmesh/shardapi"
)

// worker is the loop of docs/design.md#one-iteration-end-to-end on this node.
type worker struct {
	n        *Node
	spec     JobSpec
	bounds   [][2]int
	clients  []*shardapi.Client
	loader   *cudaops.Loader
	batches  *batchSource // non-nil under --balance (worker_balance.go)
	x        []float32
	labels   []int
	encs     [2][]*shardapi.Encoder // per shard: the set the gradient is encoded into (gi), and one a push in flight sends (pipeline.go)
	gi       int
	theta    []float32               // written only by the loop goroutine
	landing  []float32               // where a push in flight decodes its slices (pipeline.go), nil until one
	part     []float32               // the gradient of a batch's samples computed ahead (pipeline.go), nil until one
	iters    []int64                 // next iteration per shard; align keeps them equal
	reads    []SliceRead             // version of each shard's slice of theta
	ahead    int64                   // iterations after a push's that its slice serves: 1, 2 under --pipeline
	assigned [4]*shardapi.Assignment // the assignments shard 0's last two landed OKs named (pipeline.go)
	slack    int64                   // a kept slice may miss this many iterations (pull.go)
	done     chan struct{}           // closed when run returns; clients are then free
	lends    chan lendRequest        // an evaluation asking to borrow θ (lend.go)

	mu     sync.Mutex // guards stats, rate
	stats  LocalWorker
	halt   context.CancelFunc // ends run's loop (stop)
	pushes uint64             // gradients computed, for --fault-nan-every
	rate   []time.Time        // completion times of recent iterations
}

func newWorker(n *Node, spec JobSpec) (*worker, error) {
	// Each worker shuffles the whole training set with its own seed: the
	// partition does not depend on how many workers there are, which
	// changes as nodes join and die, and a restarted worker replays its
	// own sequence.
	h := fnv.New64a()
	h.Write([]byte(n.id))
	loader, err := cudaops.NewLoader(n.train, cudaops.LoaderConfig{Worker: 0, Workers: 1, BatchSize: spec.BatchSize, Seed: spec.Seed ^ h.Sum64()})
	if err != nil {
		return nil, err
	}
	w := &worker{n: n, spec: spec, bounds: n.shards.bounds, loader: loader,
		x: make([]float32, spec.BatchSize*n.model.InputSize()), labels: make([]int, spec.BatchSize),
		theta: make([]float32, n.model.NumParams()),
		iters: make([]int64, spec.Shards), reads: make([]SliceRead, spec.Shards), done: make(chan struct{}),
		lends: make(chan lendRequest)}
	w.stats.Slowdown = n.cfg.Slowdown
	w.stats.Batch = int64(spec.BatchSize)
	if spec.Balance {
		if w.batches, err = newBatchSource(n, spec); err != nil {
			return nil, err
		}
	}
	w.slack = pullSlack(spec)
	w.ahead = 1
	if spec.Pipeline {
		// The OK of push t serves iteration t+2 too: t+1 is computed
		// before the OK of t+1 arrives (pipeline.go).
		w.ahead = 2
	}
	resolve := mesh.ResolveFromMembership(n.members)
	for s := range w.bounds {
		id := uint32(s)
		cfg := shardapi.DefaultClientConfig(id, clock.WorkerID(n.id), func() []mesh.NodeID { return n.shards.candidates(id) })
		cfg.Alive = n.isMember // never dial a node membership declared dead
		cfg.Precision = spec.Precision()
		c, err := shardapi.NewClient(cfg, n.tr, resolve, n.log)
		if err != nil {
			return nil, err
		}
		w.clients = append(w.clients, c)
	}
	w.encs[0] = w.newEncoders()
	return w, nil
}

// zeroPayload is the encoding of shard s's slice of a zero gradient, in a
// buffer of its own: the fetch of a worker re-added ahead (pushAll), rare
// enough not to keep one per shard for the worker's life.
func (w *worker) zeroPayload(s int) []byte {
	return shardapi.NewEncoder(w.spec.Precision(), w.bounds[s][1]-w.bounds[s][0]).Zero()
}

// newEncoders is an encoder a shard, for one gradient's encodings.
func (w *worker) newEncoders() []*shardapi.Encoder {
	encs := make([]*shardapi.Encoder, len(w.bounds))
	for s, b := range w.bounds {
		encs[s] = shardapi.NewEncoder(w.spec.Precision(), b[1]-b[0])
	}
	return encs
}

// gradient computes the gradient of the batch in w.x on θ and encodes each
// shard's slice as backpropagation forms it (cudaops.Model.GradientTo:
// the worker never holds the gradient in float32, only its encodings),
// feeding back the shard's int8 residual for the shards in push; a shard
// not in push (it took this iteration already) gets an encoding that
// touches no residual, and is not sent. It returns the loss and the
// encodings, which stay valid until this encoder set is used again.
//
// With from > 0 it computes samples from…batch−1 of w.x and encodes their
// gradient mixed with w.part, the gradient of samples 0…from−1 computed
// on an older θ (aheadGradient), each weighted by its samples: the mean
// gradient of the batch. The loss returned is that of the samples it
// computed.
//
// A gradient computed while a push is in flight is dropped when that
// push is refused or moves the clocks (run computes again): its encoding
// has by then moved the residuals as if sent, which leaves the error
// feedback at most one int8 step of each block off, once, per dropped
// gradient, the size of one rounding it exists to cancel.
func (w *worker) gradient(from, batch int, push []bool) (float64, [][]byte, error) {
	encs := w.encs[w.gi]
	for s, e := range encs {
		var resid []byte
		if push[s] {
			resid = w.clients[s].Residual(w.bounds[s][1]-w.bounds[s][0], int64(batch))
		}
		e.Start(resid)
	}
	w.pushes++
	poison := w.n.cfg.FaultNaNEvery > 0 && w.pushes%uint64(w.n.cfg.FaultNaNEvery) == 0
	s := 0
	in := w.n.model.InputSize()
	own, mix := float32(float64(batch-from)/float64(batch)), float32(float64(from)/float64(batch))
	loss, err := w.n.model.GradientTo(w.theta, w.x[from*in:batch*in], w.labels[from:batch], func(off int, v []float32) {
		if from > 0 {
			for i, p := range w.part[off : off+len(v)] {
				v[i] = own*v[i] + mix*p
			}
		}
		if poison {
			for i := range v {
				v[i] = float32(math.NaN()) // test fault: a flaky accelerator
			}
		}
		for end := off + len(v); off < end; {
			for off < w.bounds[s][0] || off >= w.bounds[s][1] {
				s = (s + 1) % len(w.bounds) // pieces come mostly in order: the search is short
			}
			hi := min(end, w.bounds[s][1])
			encs[s].Put(off-w.bounds[s][0], v[:hi-off])
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

// maxRefusedInARow is how many iterations in a row the shards may refuse
// this worker's gradient (NaN/Inf, outlier, non-finite step) before it
// stops: one bad gradient now and then is a flaky device, recomputed and
// sent again; an unbroken run of them is a broken one or a diverging job.
const maxRefusedInARow = 20

// run trains until ctx ends or the worker is halted (a diverging job).
func (w *worker) run(ctx context.Context) {
	defer close(w.done)
	ctx, halt := context.WithCancel(ctx)
	defer halt()
	w.mu.Lock()
	w.halt = halt
	w.mu.Unlock()
	if err := w.join(ctx); err != nil {
		if ctx.Err() == nil {
			w.fail(fmt.Errorf("join: %w", err))
		}
		return
	}
	inARow := 0
	var fl *flight // under --pipeline: the push in flight while the next gradient is computed
	defer func() {
		if fl != nil {
			halt()
			<-fl.done // it uses the clients, which leave closes once run is done
		}
	}()
	for ctx.Err() == nil {
		// Under --pipeline θ is lent only after a push has settled (below):
		// here, after a refused push or a moved clock, the slices read
		// into θ would also serve the iteration computed ahead of this
		// one's push, for which a read at the gate's t_min of now is one
		// iteration short of the bound (TestInProcessEvaluationBorrowsTheWorkersParameters
		// saw lag 2 under ssp:1).
		if fl == nil && !w.spec.Pipeline && !w.lendPoint(ctx) {
			return
		}
		var t int64
		if fl != nil {
			// w.iters belongs to the push in flight until it is done: not
			// even read here (go test -race caught a slices.Min of it
			// racing with the push's w.iters[s]++).
			t = fl.iter + 1
		} else {
			t = slices.Min(w.iters)
		}
		batch, used := w.next(t)
		w.n.obs.Computing(w.n.id, t, w.reads, used.Share())
		push := w.toPush(fl)
		ahead := batch // samples computed before the push in flight lands
		if fl != nil {
			ahead = w.aheadOf(batch)
		}
		start := time.Now()
		var (
			loss float64
			grad [][]byte
			err  error
		)
		if ahead < batch {
			loss, err = w.aheadGradient(ahead)
		} else {
			loss, grad, err = w.gradient(0, batch, push)
		}
		if err != nil {
			w.fail(err)
			return
		}
		compute := w.stretch(ctx, time.Since(start), ahead)
		waitStart := time.Now()
		if fl != nil {
			prev := fl
			fl = nil
			ok, moved, stop := w.settle(ctx, prev, <-prev.done, &inARow)
			if stop {
				return
			}
			if ok {
				w.completed(prev.loss, prev.compute, time.Since(waitStart), prev.batch, prev.used)
			}
			if !ok || moved {
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
				rest, g, err := w.gradient(ahead, batch, push)
				if err != nil {
					w.fail(err)
					return
				}
				grad = g
				loss = (float64(ahead)*loss + float64(batch-ahead)*rest) / float64(batch)
				compute += w.stretch(ctx, time.Since(start), batch-ahead)
			}
			waitStart = time.Now()
		}
		next := w.newFlight(t, w.theta)
		next.loss, next.compute, next.batch, next.used = loss, compute, batch, used
		if w.spec.Pipeline {
			fl = next
			w.pipelined(ctx, fl, grad)
			continue
		}
		ok, _, stop := w.settle(ctx, next, w.pushAll(ctx, next, grad), &inARow)
		if stop {
			return
		}
		if ok {
			w.completed(loss, compute, time.Since(waitStart), batch, used)
		}
	}
}

// refusedGradient reports whether every error in err (a pushAll join) is a
// shard refusing the gradient itself: NaN/Inf, a norm outlier, or a step
// that would make a parameter non-finite.
func refusedGradient(err error) bool {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		var rej *shardapi.RejectError
		if !errors.As(e, &rej) {
			return false
		}
		switch rej.Reason {
		case shardapi.ReasonNonFinite, shardapi.ReasonOutlier, shardapi.ReasonNonFiniteStep:
		default:
			return false
		}
	}
	return len(errs) > 0
}

// refused counts and logs a gradient the shards refused.
func (w *worker) refused(err error) {
	w.n.metrics.Refused.Inc()
	w.mu.Lock()
	w.stats.Refused++
	w.stats.LastError = err.Error()
	w.mu.Unlock()
	w.n.log.Warn("gradient refused; computing another for the same iteration", "err", err)
}

// stop halts the worker loop for good with reason, shown on /status; the
// node keeps serving its shards.
func (w *worker) stop(reason string) {
	w.mu.Lock()
	halt, already := w.halt, w.stats.Stopped != ""
	if !already {
		w.stats.Stopped = reason
	}
	w.mu.Unlock()
	if already {
		return
	}
	w.n.log.Error("worker stopped", "reason", reason)
	if halt != nil {
		halt()
	}
}

// stretch emulates a slower device: it sleeps so that this iteration's
// compute time becomes slowdown·(measured + delay·batch/job batch). The
// delay is the emulated accelerator time of a speed-1 worker for the job's
// batch, so it grows with the batch as real compute does, and the slowdown
// stretches both. Only compute is stretched, never time spent waiting for
// others.
func (w *worker) stretch(ctx context.Context, measured time.Duration, batch int) time.Duration {
	delay := time.Duration(float64(w.n.cfg.ComputeDelay) * float64(batch) / float64(w.spec.BatchSize))
	target := time.Duration(float64(measured+delay) * w.n.cfg.Slowdown)
	if extra := target - measured; extra > 0 {
		t := time.NewTimer(extra)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	return target
}

// join adds this worker to every shard at one clock, the highest any shard
// gives it, and fetches θ. The fetch is a push of a zero gradient: at a
// clock above 0 it resends the iteration before, which the shard's dedupe
// acknowledges without applying; for a new worker at clock 0 it is a real
// iteration carrying no samples.
func (w *worker) join(ctx context.Context) error {
	for s := range w.clients {
		w.iters[s] = 0
	}
	if err := w.align(ctx, true); err != nil {
		return err
	}
	for s, it := range w.iters {
		if it > 0 {
			w.iters[s] = it - 1
		}
	}
	zero := make([][]byte, len(w.clients))
	for s, e := range w.encs[0] {
		zero[s] = e.Zero()
	}
	fl := w.newFlight(slices.Min(w.iters), w.theta)
	err := w.pushAll(ctx, fl, zero)
	w.land(fl)
	return err
}

// align makes this worker's clock the same on every shard: it adds the
// worker where it is missing and advances it where it is behind, to the
// highest clock any shard has it at. A worker re-added to one shard at
// that shard's t_min (declared dead by mistake) may otherwise run ahead on
// some shards and behind on others, and two such workers can hold each
// other at the staleness bound for good, each waiting on one shard for
// the other while stuck in its own push to another.
func (w *worker) align(ctx context.Context, every bool) error {
	for {
		target := slices.Max(w.iters)
		moved := false
		for s, c := range w.clients {
			if !every && w.iters[s] == target {
				continue
			}
			for {
				clk, err := c.AddWorker(ctx, target)
				if err == nil {
					w.iters[s] = clk
					break
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
				w.setErr(err)
			}
			moved = moved || w.iters[s] != target
		}
		if !moved {
			return nil
		}
		every = false
	}
}

// toPush says which shards the next gradient goes to: with no push in
// flight, those whose clock is the lowest (pushAll skips the others,
// which took the iteration before another shard refused it); with one in
// flight (whose w.iters the loop may not read), every shard.
func (w *worker) toPush(fl *flight) []bool {
	push := make([]bool, len(w.clients))
	low := int64(math.MaxInt64)
	if fl == nil {
		low = slices.Min(w.iters)
	}
	for s := range push {
		push[s] = fl != nil || w.iters[s] <= low
	}
	return push
}

// pushAll sends each shard its encoded slice grad[s] at once and waits for every
// reply, decoding each returned slice into fl.into with its version in
// fl.reads (land then makes them θ's) and shard 0's assignments in
// fl.assign. A failed push is resent with the same iteration until it
// succeeds or ctx ends; a worker the shard dropped (declared dead by
// mistake) is added again. It writes w.iters and uses the clients; of the
// loop's state it only reads w.reads (keepSlice).
func (w *worker) pushAll(ctx context.Context, fl *flight, grad [][]byte) error {
	samples, computeNs := int64(fl.batch), fl.compute.Nanoseconds()
	var wg sync.WaitGroup
	errs := make([]error, len(w.clients))
	low := slices.Min(w.iters)
	for s, c := range w.clients {
		if w.iters[s] > low {
			continue // took this iteration already; another shard refused it
		}
		wg.Add(1)
		go func(s int, c *shardapi.Client) {
			defer wg.Done()
			lo, hi := w.bounds[s][0], w.bounds[s][1]
			start := time.Now()
			payload := grad[s] // resends reuse the bytes
			samples, computeNs := samples, computeNs
			for {
				w.n.obs.PushSent(uint32(s), w.n.id, w.iters[s], samples)
				keep := samples > 0 && w.keepSlice(s)
				rep, err := c.Push(ctx, shardapi.Push{Iter: w.iters[s], Samples: samples, ComputeNs: computeNs, Payload: payload, Keep: keep, Into: fl.into[lo:hi:hi]})
				if err == nil && !keep && len(rep.Params) != hi-lo {
					err = errors.New("shard returned a slice of the wrong length")
				}
				w.addRetries(rep.Retries)
				w.addBytes(rep.Bytes)
				if rep.Held > 0 {
					w.n.metrics.GateHoldSeconds.Observe(rep.Held.Seconds())
				}
				w.n.obs.PushDone(uint32(s), w.n.id, w.iters[s], samples, err)
				if err == nil {
					w.n.metrics.PushSeconds.Observe(time.Since(start).Seconds())
					if !keep {
						// join's fetch (no samples) is answered outside the gate.
						fl.reads[s], fl.got[s] = SliceRead{Version: rep.Version, Unchecked: samples == 0}, true
					}
					if s == 0 {
						fl.assign = [2]*shardapi.Assignment{rep.Assign, rep.Ahead}
					}
					w.pulled(keep)
					w.iters[s]++
					return
				}
				if ctx.Err() != nil {
					errs[s] = ctx.Err()
					return
				}
				w.setErr(err)
				var rej *shardapi.RejectError
				if errors.As(err, &rej) {
					id := uint32(s)
					w.n.events.add(Event{Kind: EventRejected, Node: string(w.n.id), Shard: &id, Detail: rej.Error()})
				}
				if errors.As(err, &rej) && rej.Reason == shardapi.ReasonUnknownWorker {
					// Declared dead by mistake: re-added at no less than
					// this iteration, or at the shard's t_min if that is
					// higher — then align, after this push, moves the other
					// shards up to it.
					clk, err := c.AddWorker(ctx, w.iters[s])
					switch {
					case err != nil:
					case clk > w.iters[s]:
						// Re-added ahead: this gradient, pushed at clk,
						// would wait at the gate for workers that may in
						// turn wait for this one on a shard where it is
						// still at this iteration — a cycle no push
						// breaks (a bsp mesh stalled so after a healed
						// partition). Fetch the slice instead, with the
						// iteration before clk, which dedupe answers
						// outside the gate; the gradient is dropped here.
						w.iters[s], samples, computeNs, payload = clk-1, 0, 0, w.zeroPayload(s)
					default:
						w.iters[s] = clk
					}
				} else if errors.As(err, &rej) {
					errs[s] = err
					return
				}
			}
		}(s, c)
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (w *worker) completed(loss float64, compute, wait time.Duration, batch int, used *shardapi.Assignment) {
	now := time.Now()
	w.n.metrics.Iterations.Inc()
	w.n.metrics.Samples.Add(float64(batch))
	w.n.metrics.ComputeSec.Add(compute.Seconds())
	w.n.metrics.WaitSec.Add(wait.Seconds())
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stats.Iter++
	w.stats.Samples += uint64(batch)
	w.noteAssignmentLocked(used)
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

func (w *worker) addRetries(d uint64) {
	if d == 0 {
		return
	}
	w.n.metrics.Retries.Add(float64(d))
	w.mu.Lock()
	w.stats.Retries += d
	w.mu.Unlock()
}

func (w *worker) addBytes(d uint64) {
	w.mu.Lock()
	w.stats.PushBytes += d
	w.mu.Unlock()
}

func (w *worker) setErr(err error) {
	w.mu.Lock()
	w.stats.LastError = err.Error()
	w.mu.Unlock()
	w.n.log.Debug("push", "err", err)
}

func (w *worker) fail(err error) {
	w.setErr(err)
	w.n.log.Error("worker stopped", "err", err)
}

func (w *worker) status() *LocalWorker {
	w.mu.Lock()
	s := w.stats
	if len(w.rate) > 0 && time.Since(w.rate[len(w.rate)-1]) > 5*time.Second {
		s.ItersPerSec = 0
	}
	w.mu.Unlock()
	s.ReplicatedBytes, s.LogWrites = w.n.shards.dataPath()
	return &s
}

// leave waits for run to return (its ctx cancelled), then removes this
// worker from every shard so it stops holding others back at once, rather
// than after failure detection.
func (w *worker) leave(limit time.Duration) {
	<-w.done
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	defer func() {
		for _, c := range w.clients {
			c.Close()
		}
	}()
	var wg sync.WaitGroup
	for _, c := range w.clients {
		wg.Add(1)
		go func(c *shardapi.Client) {
			defer wg.Done()
			if err := c.RemoveWorker(ctx); err != nil {
				w.n.log.Debug("remove worker on leave", "err", err)
			}
		}(c)
	}
	wg.Wait()
}
