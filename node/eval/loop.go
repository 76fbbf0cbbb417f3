package eval

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"dsspmesh/mesh"
	"dsspmesh/modelfile"
	"dsspmesh/node/records"
	"dsspmesh/shardapi"
)

// Run evaluates the global parameters every e.Every while this node
// is the evaluator: a snapshot read from every shard's leader (Read),
// the same a `dssp export` gives. It keeps that snapshot for
// GET /model.safetensors?evaluated (and reads the next one into a spare
// copy: evaluatedModel) — unless the model is large enough that it reads
// into the worker's θ instead (node/worker/lend.go) —, saves it as a checkpoint when
// one is due, and sends the result to every member. It looks at the
// lease every takeoverPoll (or e.Every, if shorter), so a node the lease
// has just named evaluates at once rather than at its next e.Every tick:
// the mesh's accuracy comes back within one evaluation period of its
// evaluator's death (an evaluation's own time and the lease's move
// aside).
func (r *Room) Run(ctx context.Context, e Evaluation) {
	poll := min(e.Every, takeoverPoll)
	t := time.NewTicker(poll)
	defer t.Stop()
	var buf []float32  // the memory the next read goes into: the spare, the evaluated snapshot's before the last
	var last time.Time // the start of the last evaluation while holding the role; zero when not holding it
	for {
		select {
		case <-ctx.Done():
			return
		case claim := <-r.audit.queue:
			r.maybeAudit(ctx, e, claim)
			continue
		case <-t.C:
		}
		if r.d.Evaluator() != string(r.d.ID) {
			last = time.Time{}
			continue
		}
		// Ticks fall on multiples of poll: half a poll of slack keeps
		// the period e.Every, not e.Every + poll.
		if !last.IsZero() && time.Since(last) < e.Every-poll/2 {
			continue
		}
		last = time.Now()
		r.evaluate(ctx, e, &buf)
	}
}

// takeoverPoll is how often the evaluation loop looks at the lease when
// the evaluation period is longer.
const takeoverPoll = 250 * time.Millisecond

// evaluate runs one evaluation. A model of LendBytes or more is read
// into the worker's θ, borrowed for the evaluation (node/worker/lend.go), and not kept
// after; a smaller one into *buf, the spare, and kept, the snapshot it
// replaces becoming the spare. *buf survives a failed read for the next
// try.
func (r *Room) evaluate(ctx context.Context, e Evaluation, buf *[]float32) {
	job, ok := r.d.Job()
	if !ok {
		return
	}
	modelBytes := 4 * int64(job.Layout.Total())
	timeout := evalReadTimeout(modelBytes, slowestPath(r.d.Transport, r.d.Members))
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	began := time.Now()
	var snap *Snapshot
	var err error
	release := func() {} // gives a borrowed θ back: at once after the checkpoint, at the latest on return
	defer func() { release() }()
	w := e.Worker
	lend := w != nil && !w.Finished() && modelBytes >= int64(LendBytes)
	if lend {
		theta, back, ok := w.Borrow(rctx)
		if !ok {
			if ctx.Err() == nil {
				r.d.Logger.Warn("evaluation skipped: the worker did not lend its parameters in time", "timeout", timeout)
			}
			return
		}
		r.evaluated.dropMemory()
		var versions []*shardapi.Version
		snap, versions, err = r.ReadVersions(rctx, "evaluation", theta)
		release = func() { back(versions); release = func() {} }
	} else {
		if len(*buf) != job.Layout.Total() {
			*buf = make([]float32, job.Layout.Total())
		}
		snap, err = r.Read(rctx, "evaluation", *buf)
	}
	if err != nil {
		if ctx.Err() == nil {
			r.d.Logger.Warn("evaluation skipped", "err", err, "after", time.Since(began).Round(time.Millisecond), "timeout", timeout)
		}
		return
	}
	start := time.Now()
	ev, err := e.Evaluate(ctx, snap.Theta)
	if errors.Is(err, ErrNotNow) {
		return // the evaluator says why itself
	}
	e.Seconds.Observe(time.Since(start).Seconds())
	if err != nil {
		r.d.Logger.Warn("evaluate", "err", err)
		return
	}
	snap.Meta.Eval = &modelfile.Eval{Accuracy: ev.Accuracy, Loss: ev.Loss, Samples: ev.Samples}
	var seq uint64
	for _, sc := range snap.Meta.Shards {
		seq += uint64(max(sc.Samples, 0))
	}
	res := records.EvalResult{Accuracy: ev.Accuracy, Loss: ev.Loss, Samples: ev.Samples, At: r.d.Now(), By: string(r.d.ID), Iter: uint64(snap.Meta.Clock), Seq: seq,
		Diverged: !finite(ev.Loss) || !finite(ev.Accuracy)}
	// A checkpoint is written only once the claim is recorded: a node
	// whose lease moved on while it evaluated (a worker of a lower id had
	// its first push applied) neither serves nor checkpoints that state.
	checkpoint := func() {
		if !res.Diverged {
			// A diverged state is never checkpointed: the last checkpoint
			// stays the last good one.
			r.ckpt.maybeSave(job.Layout, r.d.Logger, snap)
		}
	}
	if lend {
		// Kept on disk, where θ's values stay once it is given back:
		// written beside the file served, hashed and recorded, the
		// checkpoint written, θ given back, and the file renamed over
		// the one served with its claim.
		path := filepath.Join(e.DataDir, EvaluatedFile)
		next := path + ".next"
		werr := modelfile.WriteFile(next, job.Layout, snap.Theta, snap.Meta)
		if werr == nil {
			res.Digest, werr = FileDigest(next)
		}
		if werr == nil {
			SignClaim(r.d.Key, &res)
			if werr = r.record(ctx, res); werr != nil {
				release()
				r.notRecorded(ctx, res, werr)
				os.Remove(next)
				return
			}
			checkpoint()
			release()
			claim := res
			werr = r.evaluated.replaceFile(next, path, &claim)
		}
		release()
		if werr != nil {
			r.d.Logger.Warn("the evaluated model not kept", "path", path, "err", werr)
			os.Remove(next)
			res.Digest = ""
		}
	} else {
		if res.Digest, err = Digest(job.Layout, snap.Theta, snap.Meta); err != nil {
			r.d.Logger.Warn("the evaluated model's digest", "err", err)
		}
		SignClaim(r.d.Key, &res)
		if err := r.record(ctx, res); err != nil {
			r.notRecorded(ctx, res, err)
			return
		}
		checkpoint()
		claim := res
		*buf = r.evaluated.swap(snap, &claim)
	}
	if res.Sig == nil {
		SignClaim(r.d.Key, &res)
	}
	e.Count.Inc()
	e.Done(ctx, res)
	r.d.Logger.Info("evaluated", "accuracy", ev.Accuracy, "loss", ev.Loss, "clock", snap.Meta.Clock, "seq", seq, "digest", res.Digest, "read", start.Sub(began).Round(time.Millisecond))
}

// notRecorded says that evaluation e was dropped, shard 0 not having
// recorded its claim (record.go): it is neither served nor shown, and the
// next evaluation tries again.
// A refusal because the lease has moved on (a worker of a lower id had
// its first push applied) is the lease working, said at INFO; nothing
// is said while the node stops.
func (r *Room) notRecorded(ctx context.Context, e records.EvalResult, err error) {
	switch {
	case ctx.Err() != nil:
	case errors.Is(err, shardapi.ErrRejected) && strings.Contains(err.Error(), shardapi.NotHolder):
		r.d.Logger.Info("evaluation dropped: the evaluation lease moved on", "seq", e.Seq, "err", err)
	default:
		r.d.Logger.Warn("evaluation dropped: shard 0 did not record its claim", "seq", e.Seq, "accuracy", e.Accuracy, "digest", e.Digest, "err", err)
	}
}

// evalReadTimeout bounds the read of a model of modelBytes for one
// evaluation: 10 s, and a second for every evalReadRate bytes beyond (at
// a flat 10 s not one evaluation of a 100 MB model finished while its
// mesh trained on two loaded cores), or for every pathShare of the
// slowest path's measured delivery rate (bytes/s, 0: unknown) when that
// is slower: across a 100 Mbit/s link the training's own pushes and
// replies share the path, and at 4 MiB/s not one evaluation of a 100 MB
// model finished (the link lab's two sites). While shards elect leaders
// the evaluation is skipped, not queued.
func evalReadTimeout(modelBytes int64, pathRate float64) time.Duration {
	rate := float64(evalReadRate)
	if pathRate > 0 {
		rate = min(rate, pathRate*pathShare)
	}
	return 10*time.Second + time.Duration(float64(modelBytes)/rate*float64(time.Second))
}

// evalReadRate (bytes/s) is the slowest model read an evaluation waits for
// where no path measures slower.
const evalReadRate = 4 << 20

// pathShare is the share of a path's measured rate a read is given.
const pathShare = 0.25

// slowestPath is the least delivery rate the transport measured to any
// live member (mesh.RTTReporter), 0 when it measures none.
func slowestPath(tr mesh.Transport, members mesh.Membership) float64 {
	rr, ok := tr.(mesh.RTTReporter)
	if !ok || members == nil {
		return 0
	}
	least := 0.0
	for _, m := range members.Members() {
		if r, ok := rr.PeerRTT(m.ID); ok && r.Rate > 0 && (least == 0 || r.Rate < least) {
			least = r.Rate
		}
	}
	return least
}
