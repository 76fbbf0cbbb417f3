package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"dsspmesh/node/records"
	"dsspmesh/shardapi"
)

// One push of every shard: what it carries (flight), sending it (pushAll),
// and the two pushes outside the loop's rhythm, join's fetch and align.

// flight is one pushAll of iteration iter: what it carries and where its
// replies go.
type flight struct {
	iter    int64
	loss    float64
	compute time.Duration
	batch   int
	steps   int                  // the round's local steps
	used    *shardapi.Assignment // the assignment the gradient was computed on, if any
	want    int64                // the round the push asks shard 0 for (Worker.want)
	wire    []time.Duration      // per shard: its reply's time less the gate's hold (autosteps.go)

	into   []float32               // θ (no push in flight) or w.landing (pipelined)
	apart  bool                    // into is w.landing: land copies the slices into θ
	reads  []records.SliceRead     // per shard: the version of the slice written into into
	got    []bool                  // per shard: a slice was written (not kept)
	assign [2]*shardapi.Assignment // shard 0's last OK: for iter+1 and iter+2
	done   chan error              // pipelined: pushAll's result
}

// newFlight is a push of iteration iter whose slices go into into.
func (w *Worker) newFlight(iter int64, into []float32) *flight {
	return &flight{iter: iter, into: into, reads: make([]records.SliceRead, len(w.cfg.Bounds)), got: make([]bool, len(w.cfg.Bounds)),
		wire: make([]time.Duration, len(w.cfg.Bounds))}
}

// land writes what fl's push brought into the loop's state: each pulled
// slice into θ (when it went to the landing buffer) with its version, and
// shard 0's assignments. The loop calls it once fl's push returned.
func (w *Worker) land(fl *flight) {
	for s, got := range fl.got {
		if !got {
			continue
		}
		if lo, hi := w.cfg.Bounds[s][0], w.cfg.Bounds[s][1]; fl.apart {
			copy(w.theta[lo:hi], fl.into[lo:hi])
		}
		w.step.landed(s, fl.reads[s])
	}
	if fl.assign[0] != nil {
		// The previous OK's are kept too: after a refused push the loop
		// computes that iteration again, which only an older OK named.
		w.assigned = [4]*shardapi.Assignment{w.assigned[2], w.assigned[3], fl.assign[0], fl.assign[1]}
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
	samples, computeNs, want := int64(fl.batch), fl.compute.Nanoseconds(), fl.want
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
				rep, err := c.push(ctx, iters[s], samples, computeNs, want, payload, into)
				w.addRetries(rep.Retries)
				w.addBytes(rep.Bytes)
				w.d.Observer.PushDone(uint32(s), w.d.ID, iters[s], samples, err)
				d := w.step.Replied(s, Reply{Err: err, Canceled: ctx.Err() != nil, Held: rep.Held})
				if d.ObserveHold > 0 {
					w.d.Metrics.GateHoldSeconds.Observe(d.ObserveHold.Seconds())
				}
				if d.Act == PushDone {
					took := time.Since(start)
					w.d.Metrics.PushSeconds.Observe(took.Seconds())
					fl.wire[s] = max(took-rep.Held, 0)
					if !keep {
						// join's fetch (no samples) is answered outside the gate.
						fl.reads[s], fl.got[s] = records.SliceRead{Version: rep.Version, Unchecked: samples == 0}, true
					}
					if s == 0 {
						fl.assign = [2]*shardapi.Assignment{rep.Assign, rep.Ahead}
						w.noteEvaluator(rep.Evaluator)
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
					ev := records.Event{Kind: records.EventRejected, Node: string(w.d.ID), Shard: &id, Detail: err.Error()}
					if rej := (*shardapi.RejectError)(nil); errors.As(err, &rej) {
						ev.Reason = rej.Reason.String()
					}
					w.d.Event(ev)
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

// join adds this worker to every shard at one clock, the highest any shard
// gives it, and fetches θ. The fetch is a push of a zero gradient: at a
// clock above 0 it resends the iteration before, which the shard's dedupe
// acknowledges without applying; for a new worker at clock 0 it is a real
// iteration carrying no samples.
func (w *Worker) join(ctx context.Context) error {
	w.step.rejoin()
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
					w.step.aligned(s, clk)
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
