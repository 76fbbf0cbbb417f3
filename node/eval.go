package node

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"time"

	"dsspmesh/modelfile"
	"dsspmesh/node/status"
	"dsspmesh/shardapi"
)

// evaluator is the live training member with the lowest node id: every
// node computes the same answer from the same membership view, and when it
// dies the next one takes over at its next tick.
func (n *Node) evaluator() string {
	for _, m := range n.members.Members() { // sorted by id
		if m.Trains {
			return string(m.ID)
		}
	}
	return ""
}

// evalLoop evaluates the global parameters every EvalEvery while this node
// is the evaluator: a snapshot read from every shard's leader (readModel),
// the same a `dssp export` gives. It keeps that snapshot for
// GET /model.safetensors?evaluated (and reads the next one into its
// memory: evaluatedModel) — unless the model is large enough that it reads
// into the worker's θ instead (node/worker/lend.go) —, saves it as a checkpoint when
// one is due, and sends the result to every member.
func (n *Node) evalLoop(ctx context.Context) {
	t := time.NewTicker(n.cfg.EvalEvery)
	defer t.Stop()
	var buf []float32 // the memory the next read goes into: the last evaluated snapshot's
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n.evaluator() != string(n.id) {
			continue
		}
		n.evaluate(ctx, &buf)
	}
}

// evaluate runs one evaluation. A model of evalLendBytes or more is read
// into the worker's θ, borrowed for the evaluation (node/worker/lend.go), and not kept
// after; a smaller one into *buf, the last evaluated snapshot's memory,
// and kept. *buf survives a failed read for the next try.
func (n *Node) evaluate(ctx context.Context, buf *[]float32) {
	modelBytes := 4 * int64(n.model.NumParams())
	timeout := evalReadTimeout(modelBytes)
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var snap *modelSnapshot
	var err error
	release := func() {} // gives a borrowed θ back: at once after the checkpoint, at the latest on return
	defer func() { release() }()
	n.mu.RLock()
	w := n.worker
	n.mu.RUnlock()
	lend := w != nil && !w.Finished() && modelBytes >= int64(evalLendBytes)
	if lend {
		theta, back, ok := w.Borrow(rctx)
		if !ok {
			if ctx.Err() == nil {
				n.log.Warn("evaluation skipped: the worker did not lend its parameters in time", "timeout", timeout)
			}
			return
		}
		n.evaluated.dropMemory()
		var versions []*shardapi.Version
		snap, versions, err = n.readModelVersions(rctx, "evaluation", theta)
		release = func() { back(versions); release = func() {} }
	} else {
		if *buf == nil {
			*buf = n.evaluated.take()
		}
		if *buf == nil {
			*buf = make([]float32, n.model.NumParams())
		}
		snap, err = n.readModel(rctx, "evaluation", *buf)
	}
	if err != nil {
		if ctx.Err() == nil {
			n.log.Warn("evaluation skipped", "err", err)
		}
		return
	}
	start := time.Now()
	ev, err := n.evalModel.Evaluate(snap.theta, n.test)
	n.metrics.EvalSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		n.log.Warn("evaluate", "err", err)
		return
	}
	snap.meta.Eval = &modelfile.Eval{Accuracy: ev.Accuracy, Loss: ev.Loss, Samples: ev.Samples}
	var seq uint64
	for _, sc := range snap.meta.Shards {
		seq += uint64(max(sc.Samples, 0))
	}
	e := EvalResult{Accuracy: ev.Accuracy, Loss: ev.Loss, Samples: ev.Samples, At: n.now(), By: string(n.id), Iter: uint64(snap.meta.Clock), Seq: seq,
		Diverged: !finite(ev.Loss) || !finite(ev.Accuracy)}
	if !e.Diverged {
		// A diverged state is never checkpointed: the last checkpoint
		// stays the last good one.
		n.ckpt.maybeSave(n, snap)
	}
	if lend {
		// Kept on disk, where θ's values stay once it is given back.
		path := filepath.Join(n.dir.Path, evaluatedFile)
		if err := modelfile.WriteFile(path, n.model.Layout(), snap.theta, snap.meta); err != nil {
			n.log.Warn("the evaluated model not kept", "path", path, "err", err)
		} else {
			n.evaluated.set(nil, path)
		}
		release()
	} else {
		n.evaluated.set(snap, "")
		*buf = nil
	}
	n.metrics.Evals.Inc()
	n.setEval(e)
	n.broadcastEval(ctx, e)
	n.log.Info("evaluated", "accuracy", ev.Accuracy, "loss", ev.Loss, "clock", snap.meta.Clock, "seq", seq)
}

// evalReadTimeout bounds the read of a model of modelBytes for one
// evaluation: 10 s, and a second for every evalReadRate bytes beyond (at
// a flat 10 s not one evaluation of a 100 MB model finished while its
// mesh trained on two loaded cores). While shards elect leaders the
// evaluation is skipped, not queued.
func evalReadTimeout(modelBytes int64) time.Duration {
	return 10*time.Second + time.Duration(float64(modelBytes)/evalReadRate*float64(time.Second))
}

// evalReadRate (bytes/s) is the slowest model read an evaluation waits for.
const evalReadRate = 4 << 20

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// setEval keeps e if it is newer than the evaluation held: a larger Seq
// (the mesh's own order of parameter states), or the same Seq evaluated
// later. Wall-clock time alone never wins, so a peer with a fast clock
// cannot freeze the evaluation shown. A diverged evaluation stops this
// node's worker.
func (n *Node) setEval(e EvalResult) {
	n.mu.Lock()
	newer := n.eval == nil || e.Seq > n.eval.Seq || e.Seq == n.eval.Seq && e.At.After(n.eval.At)
	if newer {
		n.eval = &e
		n.evals = append(n.evals, e)
		if len(n.evals) > evalHistorySize {
			n.evals = slices.Delete(n.evals, 0, len(n.evals)-evalHistorySize)
		}
	}
	w := n.worker
	n.mu.Unlock()
	if e.Diverged && w != nil {
		n.diverged(w, e)
	}
}

// diverged stops the worker: a non-finite loss at evaluation means the job
// diverged, and training on garbage only wastes the mesh. The shards keep
// their parameters (the FSM keeps them finite) and the evaluator never
// checkpoints a diverged state, so the newest checkpoint in
// --checkpoint-dir is the last good one to restart from (--init-from),
// with a smaller --lr.
func (n *Node) diverged(w trainer, e EvalResult) {
	reason := fmt.Sprintf("the job diverged: evaluation by %s at sequence %d (its iteration %d) gave loss %v, accuracy %v; "+
		"workers stop rather than train on garbage — restart from the last checkpoint (--init-from) with a smaller --lr", e.By, e.Seq, e.Iter, e.Loss, e.Accuracy)
	w.Stop(reason)
}

// evalLendBytes is the model size from which the evaluation borrows the
// worker's θ (node/worker/lend.go): a second copy of a smaller model costs
// less than the runtime's own base (memLimitBase), and the pause would
// show in a small model's iterations. The evaluated snapshot, for
// GET /model.safetensors?evaluated, is then written to the data dir
// (evaluatedFile) before θ goes back.
var evalLendBytes = 32 << 20 // a var only for tests (export_test.go)

// Status is this node's view of the mesh; safe for concurrent use.
func (n *Node) Status() Status {
	s := Status{Node: string(n.id), Gossip: n.cfg.GossipAddr(), QUIC: n.cfg.QUICAddr(), Started: n.started, Now: n.now(),
		Members: []MemberStatus{}, Shards: []ShardStatus{}, Workers: []WorkerStatus{}, Trainers: []TrainerStatus{}}
	n.mu.RLock()
	s.Phase = n.phase
	if n.spec != nil {
		spec := *n.spec
		s.Spec, s.Policy = &spec, spec.PolicyText()
	}
	if n.eval != nil {
		e := *n.eval
		s.Eval = &e
	}
	s.EvalHistory = append([]EvalResult{}, n.evals...)
	shards, w := n.shards, n.worker
	n.mu.RUnlock()
	if n.members != nil {
		for _, m := range n.members.Members() {
			s.Members = append(s.Members, MemberStatus{ID: string(m.ID), Gossip: m.Addr, QUIC: m.QUICAddr, Trains: m.Trains, Backend: m.Backend})
		}
		s.Evaluator = n.evaluator()
	}
	s.Insecure = n.cfg.Insecure
	if n.ckpt != nil {
		s.Checkpoint, _ = n.ckpt.dir.Latest()
	}
	if shards != nil {
		s.Refusals = shards.Refusals()
		s.Shards, s.Workers = shards.Status()
		if s.Workers == nil {
			s.Workers = []WorkerStatus{}
		}
	}
	if w != nil {
		s.Worker = w.Status()
	}
	status.Fill(&n.view, &s)
	s.Events = n.events.List()
	if n.tr != nil {
		ts := n.tr.Stats()
		s.Transport = TransportStatus{FrameErrors: ts.FrameErrors, PreambleErrors: ts.PreambleErrors, DialFailures: ts.DialFailures, Dials: ts.Dials}
	}
	return s
}
