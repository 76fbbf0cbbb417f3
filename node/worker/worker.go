package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"dsspmesh/mesh"
	"dsspmesh/node/records"
	"dsspmesh/shardapi"

	"github.com/prometheus/client_golang/prometheus"
)

// Deps are the worker's edges, built by the node that runs it.
type Deps struct {
	// ID is the worker's (its node's) id.
	ID mesh.NodeID
	// Compute computes the gradients (a [ModelCompute], perhaps wrapped by
	// [Emulate]).
	Compute Compute
	// Transport and Members reach the shards' leaders.
	Transport mesh.Transport
	Members   mesh.Membership
	// Candidates is where to look for a shard's leader, in order.
	Candidates func(shard uint32) []mesh.NodeID
	// Alive reports whether a node is a live member (never dial a dead one).
	Alive func(mesh.NodeID) bool
	// Observer sees every push and every iteration's reads.
	Observer records.Observer
	// Event records what the mesh did to the worker (a rejected push).
	Event func(records.Event)
	// DataPath reads the replicas' data-path costs for the status (nil: 0).
	DataPath func() (replicated, logWrites uint64)
	Metrics  Metrics
	Logger   *slog.Logger
}

// Metrics are the worker's Prometheus counters and histograms (the
// node's registry holds them).
type Metrics struct {
	Iterations, Samples, ComputeSec, WaitSec, Retries, Refused prometheus.Counter
	PushSeconds, GateHoldSeconds                               prometheus.Observer
}

// Config is the job as the worker runs it.
type Config struct {
	// Bounds is each shard's range of the flat parameter vector.
	Bounds [][2]int
	// Batch is the job's mini-batch.
	Batch     int
	Precision shardapi.Precision
	// Pipeline and PipelineFresh: pipeline.go.
	Pipeline      bool
	PipelineFresh float64
	// Balance: the batch of each iteration comes from shard 0's
	// assignment (balance.go).
	Balance bool
	// Slack is how many iterations a kept slice may miss (pull.go): the
	// policy's s_L.
	Slack int64
	// Slowdown is shown in the status (the emulation itself is Deps.Compute's).
	Slowdown float64
}

// Worker is the loop of docs/design.md#one-iteration-end-to-end on one
// node.
type Worker struct {
	d       Deps
	cfg     Config
	compute Compute
	clients []shardClient
	encs    [2][]*shardapi.Encoder // per shard: the set the gradient is encoded into (gi), and one a push in flight sends (pipeline.go)
	gi      int
	theta   []float32 // written only by the loop goroutine
	landing []float32 // where a push in flight decodes its slices (pipeline.go), nil until one
	part    []float32 // the gradient of a batch's samples computed ahead (pipeline.go), nil until one
	// step holds the loop's decisions and what they read: the clocks per
	// shard, the versions of θ's slices (step.go).
	step     *Step
	assigned [4]*shardapi.Assignment // the assignments shard 0's last two landed OKs named (pipeline.go)
	done     chan struct{}           // closed when Run returns; clients are then free
	lends    chan lendRequest        // an evaluation asking to borrow θ (lend.go)

	mu    sync.Mutex // guards stats, rate, halt
	stats records.LocalWorker
	halt  context.CancelFunc // ends Run's loop (Stop)
	rate  []time.Time        // completion times of recent iterations
}

// New builds a worker; [Worker.Run] runs it.
func New(d Deps, cfg Config) (*Worker, error) {
	clients, err := newShardClients(d, len(cfg.Bounds), cfg.Precision)
	if err != nil {
		return nil, err
	}
	w := newWorker(d, cfg, clients)
	w.theta = make([]float32, d.Compute.NumParams())
	w.encs[0] = w.newEncoders()
	return w, nil
}

func newWorker(d Deps, cfg Config, clients []shardClient) *Worker {
	if d.Observer == nil {
		d.Observer = records.NoObserver{}
	}
	ahead := int64(1)
	if cfg.Pipeline {
		// The OK of push t serves iteration t+2 too: t+1 is computed
		// before the OK of t+1 arrives (pipeline.go).
		ahead = 2
	}
	w := &Worker{d: d, cfg: cfg, compute: d.Compute, clients: clients, step: NewStep(len(cfg.Bounds), ahead, cfg.Slack),
		done: make(chan struct{}), lends: make(chan lendRequest)}
	w.stats.Slowdown = cfg.Slowdown
	w.stats.Batch = int64(cfg.Batch)
	return w
}

// zeroPayload is the encoding of shard s's slice of a zero gradient, in a
// buffer of its own: the fetch of a worker re-added ahead (pushAll), rare
// enough not to keep one per shard for the worker's life.
func (w *Worker) zeroPayload(s int) []byte {
	return shardapi.NewEncoder(w.cfg.Precision, w.cfg.Bounds[s][1]-w.cfg.Bounds[s][0]).Zero()
}

// newEncoders is an encoder a shard, for one gradient's encodings.
func (w *Worker) newEncoders() []*shardapi.Encoder {
	encs := make([]*shardapi.Encoder, len(w.cfg.Bounds))
	for s, b := range w.cfg.Bounds {
		encs[s] = shardapi.NewEncoder(w.cfg.Precision, b[1]-b[0])
	}
	return encs
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
	loss, err := w.compute.Gradient(ctx, w.theta, from, batch, func(off int, v []float32) {
		if from > 0 {
			for i, p := range w.part[off : off+len(v)] {
				v[i] = own*v[i] + mix*p
			}
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

// Run trains until ctx ends or the worker is stopped (a diverging job).
func (w *Worker) Run(ctx context.Context) {
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
			ahead = aheadOf(w.cfg.PipelineFresh, batch)
		}
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
			w.fail(err)
			return
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
				w.completed(prev.loss, prev.compute, time.Since(waitStart), prev.batch, prev.used)
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
					w.fail(err)
					return
				}
				grad = g
				loss = (float64(ahead)*loss + float64(batch-ahead)*rest) / float64(batch)
				compute += time.Since(start)
			}
			waitStart = time.Now()
		}
		next := w.newFlight(t, w.theta)
		next.loss, next.compute, next.batch, next.used = loss, compute, batch, used
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
			w.completed(loss, compute, time.Since(waitStart), batch, used)
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
	w.d.Logger.Warn("gradient refused; computing another for the same iteration", "err", err)
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

// join adds this worker to every shard at one clock, the highest any shard
// gives it, and fetches θ. The fetch is a push of a zero gradient: at a
// clock above 0 it resends the iteration before, which the shard's dedupe
// acknowledges without applying; for a new worker at clock 0 it is a real
// iteration carrying no samples.
func (w *Worker) join(ctx context.Context) error {
	for s := range w.step.Iters {
		w.step.Iters[s] = 0
	}
	if err := w.align(ctx, true); err != nil {
		return err
	}
	t := w.step.JoinFetch()
	zero := make([][]byte, len(w.clients))
	for s, e := range w.encs[0] {
		zero[s] = e.Zero()
	}
	fl := w.newFlight(t, w.theta)
	err := w.pushAll(ctx, fl, zero)
	w.land(fl)
	return err
}

// align makes this worker's clock the same on every shard: it adds the
// worker where it is missing and advances it where it is behind, to the
// highest clock any shard has it at (Step.AlignRound). A worker re-added
// to one shard at that shard's t_min (declared dead by mistake) may
// otherwise run ahead on some shards and behind on others, and two such
// workers can hold each other at the staleness bound for good, each
// waiting on one shard for the other while stuck in its own push to
// another.
func (w *Worker) align(ctx context.Context, every bool) error {
	for {
		target, shards := w.step.AlignRound(every)
		if len(shards) == 0 {
			return nil
		}
		for _, s := range shards {
			for {
				clk, err := w.clients[s].addWorker(ctx, target)
				if err == nil {
					w.step.Iters[s] = clk
					break
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
				w.setErr(err)
			}
		}
		every = false
	}
}

// pushAll sends each shard its encoded slice grad[s] at once and waits for every
// reply, decoding each returned slice into fl.into with its version in
// fl.reads (land then makes them θ's) and shard 0's assignments in
// fl.assign. What follows each reply is Step.Replied's decision: a failed
// push is resent with the same iteration until it succeeds or ctx ends; a
// worker the shard dropped (declared dead by mistake) is added again. It
// writes the clocks and uses the clients; of the loop's state it only
// reads the slices' versions (Step.Keep).
func (w *Worker) pushAll(ctx context.Context, fl *flight, grad [][]byte) error {
	samples, computeNs := int64(fl.batch), fl.compute.Nanoseconds()
	var wg sync.WaitGroup
	errs := make([]error, len(w.clients))
	iters := w.step.Iters
	for s, send := range w.step.Targets(false) {
		if !send {
			continue // took this iteration already; another shard refused it
		}
		wg.Add(1)
		go func(s int, c shardClient) {
			defer wg.Done()
			lo, hi := w.cfg.Bounds[s][0], w.cfg.Bounds[s][1]
			start := time.Now()
			payload := grad[s] // resends reuse the bytes
			samples, computeNs := samples, computeNs
			for {
				w.d.Observer.PushSent(uint32(s), w.d.ID, iters[s], samples)
				keep := w.step.Keep(s, samples)
				into := fl.into[lo:hi:hi]
				if keep {
					into = nil
				}
				rep, err := c.push(ctx, iters[s], samples, computeNs, payload, into)
				w.addRetries(rep.retries)
				w.addBytes(rep.bytes)
				w.d.Observer.PushDone(uint32(s), w.d.ID, iters[s], samples, err)
				d := w.step.Replied(s, Reply{Err: err, Canceled: ctx.Err() != nil, Held: rep.held})
				if d.ObserveHold > 0 {
					w.d.Metrics.GateHoldSeconds.Observe(d.ObserveHold.Seconds())
				}
				if d.Act == PushDone {
					w.d.Metrics.PushSeconds.Observe(time.Since(start).Seconds())
					if !keep {
						// join's fetch (no samples) is answered outside the gate.
						fl.reads[s], fl.got[s] = records.SliceRead{Version: rep.version, Unchecked: samples == 0}, true
					}
					if s == 0 {
						fl.assign = [2]*shardapi.Assignment{rep.assign, rep.ahead}
					}
					w.pulled(keep)
					return
				}
				if ctx.Err() != nil {
					errs[s] = ctx.Err()
					return
				}
				w.setErr(err)
				if d.Rejected {
					id := uint32(s)
					w.d.Event(records.Event{Kind: records.EventRejected, Node: string(w.d.ID), Shard: &id, Detail: err.Error()})
				}
				switch d.Act {
				case PushGiveUp:
					errs[s] = err
					return
				case PushReAdd:
					clk, err := c.addWorker(ctx, iters[s])
					if w.step.ReAdded(s, clk, err) == PushFetch {
						samples, computeNs, payload = 0, 0, w.zeroPayload(s)
					}
				}
			}
		}(s, w.clients[s])
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (w *Worker) completed(loss float64, compute, wait time.Duration, batch int, used *shardapi.Assignment) {
	now := time.Now()
	w.d.Metrics.Iterations.Inc()
	w.d.Metrics.Samples.Add(float64(batch))
	w.d.Metrics.ComputeSec.Add(compute.Seconds())
	w.d.Metrics.WaitSec.Add(wait.Seconds())
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

func (w *Worker) addRetries(d uint64) {
	if d == 0 {
		return
	}
	w.d.Metrics.Retries.Add(float64(d))
	w.mu.Lock()
	w.stats.Retries += d
	w.mu.Unlock()
}

func (w *Worker) addBytes(d uint64) {
	w.mu.Lock()
	w.stats.PushBytes += d
	w.mu.Unlock()
}

func (w *Worker) setErr(err error) {
	w.mu.Lock()
	w.stats.LastError = err.Error()
	w.mu.Unlock()
	w.d.Logger.Debug("push", "err", err)
}

func (w *Worker) fail(err error) {
	w.setErr(err)
	w.d.Logger.Error("worker stopped", "err", err)
}

// Status is the worker loop's record for /status; safe for concurrent use.
func (w *Worker) Status() *records.LocalWorker {
	w.mu.Lock()
	s := w.stats
	if len(w.rate) > 0 && time.Since(w.rate[len(w.rate)-1]) > 5*time.Second {
		s.ItersPerSec = 0
	}
	w.mu.Unlock()
	if w.d.DataPath != nil {
		s.ReplicatedBytes, s.LogWrites = w.d.DataPath()
	}
	return &s
}

// Leave waits for Run to return (its ctx cancelled), then removes this
// worker from every shard so it stops holding others back at once, rather
// than after failure detection.
func (w *Worker) Leave(limit time.Duration) {
	<-w.done
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	defer func() {
		for _, c := range w.clients {
			c.close()
		}
	}()
	var wg sync.WaitGroup
	for _, c := range w.clients {
		wg.Add(1)
		go func(c shardClient) {
			defer wg.Done()
			if err := c.removeWorker(ctx); err != nil {
				w.d.Logger.Debug("remove worker on leave", "err", err)
			}
		}(c)
	}
	wg.Wait()
}
