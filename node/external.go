package node

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"dsspmesh/cudaops"
	"dsspmesh/node/eval"
	"dsspmesh/node/job"
	"dsspmesh/node/trainer"
)

// startTrainerSocket listens on <data-dir>/trainer.sock for the node's
// trainers (--trainer external, node/trainer.Host) and serves it until ctx
// ends. fileTensors are --init-from's tensors for the first trainer to
// order (nil: none).
func (n *Node) startTrainerSocket(ctx context.Context, spec job.Spec, fileTensors cudaops.Layout) error {
	var layout cudaops.Layout
	if spec.External() && spec.Layout != "" {
		l, err := spec.ParsedLayout()
		if err != nil {
			return err
		}
		layout = l
	}
	h, err := trainer.NewHost(ctx, trainer.HostDeps{Socket: filepath.Join(n.dir.Path, TrainerSocket), Node: string(n.id), Job: n.jobSpec,
		Layout: layout, FileTensors: fileTensors, Logger: n.log})
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.ext = h
	n.mu.Unlock()
	n.log.Info("trainer socket: a trainer attaches here (env DSSP_TRAINER_SOCKET)", "trainer_socket", h.Path())
	n.wg.Go(func() { h.Serve(ctx) })
	return nil
}

// layoutFromFile settles a new external job's layout on the bootstrap
// node from --init-from before the trainer socket opens: the file's
// job's layout when it names one. Otherwise the file's tensors wait for
// the first trainer to order them (trainer.HostDeps.FileTensors); spec
// comes back without a layout.
func (n *Node) layoutFromFile(spec job.Spec) (job.Spec, cudaops.Layout, error) {
	l, theta, tensors, err := job.LoadExternalInitFrom(spec.InitFrom)
	if err != nil {
		return spec, nil, err
	}
	if l == nil {
		return spec, tensors, nil
	}
	n.initTheta = theta
	spec, err = n.fixLayout(spec, l)
	return spec, nil, err
}

// awaitLayout settles a new external job's layout on the bootstrap node
// from the first trainer that attaches (trainer.Host.AwaitLayout): its
// initial parameters become θ₀. It returns the spec with the layout and
// its shards resolved.
func (n *Node) awaitLayout(ctx context.Context, spec job.Spec) (job.Spec, error) {
	if n.ext == nil {
		return spec, fmt.Errorf("--model %s on a new mesh needs --trainer %s (its first trainer fixes the layout) or --init-from FILE", job.ExternalModel, TrainerExternal)
	}
	n.setPhase("waiting-trainer")
	l, theta0, err := n.ext.AwaitLayout(ctx)
	if err != nil {
		return spec, err
	}
	n.initTheta = theta0
	n.setPhase("joining")
	return n.fixLayout(spec, l)
}

// fixLayout records l as spec's layout, with the shards resolved for it.
func (n *Node) fixLayout(spec job.Spec, l cudaops.Layout) (job.Spec, error) {
	spec.Layout = job.FormatLayout(l)
	spec, err := job.ResolveShards(spec)
	if err != nil {
		return spec, err
	}
	if err := spec.Validate(); err != nil {
		return spec, err
	}
	n.setSpec(spec)
	n.log.Info("the job's layout is fixed", "tensors", len(l), "params", l.Total(), "shards", spec.Shards)
	return spec, nil
}

// runExternal is the worker's lifecycle under --trainer external: a
// worker runs while a trainer is attached. A trainer that goes is a
// worker that left (removed from every shard at once, as on a graceful
// leave); the next one to attach is re-added as a restarted node's
// worker is.
func (n *Node) runExternal(ctx context.Context, spec job.Spec) {
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-n.ext.Attached():
			n.trainWith(ctx, spec, e)
		}
	}
}

func (n *Node) trainWith(ctx context.Context, spec job.Spec, e *trainer.External) {
	n.mu.RLock()
	stopped := n.stopped
	n.mu.RUnlock()
	if stopped != "" {
		e.Stop(trainer.StopStopped, "this node stopped training: "+stopped)
		return
	}
	w, err := n.newExternalWorker(spec, e)
	if err != nil {
		n.log.Error("no worker for the trainer", "err", err)
		e.Close(err.Error())
		return
	}
	n.mu.Lock()
	n.worker = w
	n.mu.Unlock()
	n.log.Info("trainer attached: the worker joins")
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.Run(wctx) }()
	select {
	case <-e.Done():
		n.log.Info("trainer detached: its worker leaves the shards", "reason", e.Err())
	case <-done:
		if ctx.Err() != nil {
			e.Close("node leaving")
			break
		}
		// The worker stopped itself (its updates refused, the job
		// diverged): the trainer hears why, as an exception from step().
		reason := "the node stopped this trainer's worker"
		if st := w.Status(); st != nil && st.Stopped != "" {
			reason = st.Stopped
		}
		n.log.Warn("the worker stopped: its trainer is told", "reason", reason)
		e.Stop(trainer.StopStopped, reason)
	case <-ctx.Done():
		e.Close("node leaving")
	}
	cancel()
	<-done
	w.Leave(n.cfg.LeaveTimeout)
	n.ext.Detached(e)
	n.mu.Lock()
	if n.worker == w {
		n.worker = nil
	}
	n.mu.Unlock()
}

// evaluateExternal is the evaluation of an external job
// (trainer.Host.Evaluate); without a trainer attached the tick is
// skipped (eval.ErrNotNow).
func (n *Node) evaluateExternal(ctx context.Context, theta []float32) (cudaops.Eval, error) {
	ev, err := n.ext.Evaluate(ctx, theta)
	if errors.Is(err, trainer.ErrNoTrainer) {
		err = fmt.Errorf("%w: %w", eval.ErrNotNow, err)
	}
	return ev, err
}
