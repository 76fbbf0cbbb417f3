package node

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"dsspmesh/cudaops"
	"dsspmesh/modelfile"
	"dsspmesh/node/eval"
	"dsspmesh/node/job"
	"dsspmesh/node/trainer"
)

// startTrainerSocket listens on <data-dir>/trainer.sock for the node's
// trainers (--trainer external) and serves it until ctx ends. fileTensors
// are --init-from's tensors for the first trainer to order (nil: none).
func (n *Node) startTrainerSocket(ctx context.Context, spec JobSpec, fileTensors cudaops.Layout) error {
	x := &externalTrainer{attached: make(chan *trainer.External, 1), ready: make(chan struct{}), fileTensors: fileTensors}
	if spec.External() && spec.Layout != "" {
		l, err := spec.ParsedLayout()
		if err != nil {
			return err
		}
		x.layout = l
		close(x.ready)
	}
	srv, err := trainer.Listen(trainer.Config{Socket: filepath.Join(n.dir.Path, TrainerSocket)}, trainer.Deps{
		Node: string(n.id), Admit: n.admitTrainer, Init: n.initFromTrainer, Logger: n.log,
		Attached: func(e *trainer.External) {
			x.mu.Lock()
			x.attaches++
			x.current = e
			x.mu.Unlock()
			select {
			case x.attached <- e:
			case <-ctx.Done():
				e.Close("node leaving")
			}
		},
	})
	if err != nil {
		return err
	}
	x.srv = srv
	n.mu.Lock()
	n.ext = x
	n.mu.Unlock()
	n.log.Info("trainer socket: a trainer attaches here (env DSSP_TRAINER_SOCKET)", "trainer_socket", srv.Path())
	n.wg.Add(1)
	go func() { defer n.wg.Done(); srv.Serve(ctx) }()
	return nil
}

// admitTrainer is trainer.Deps.Admit: the trainer's layout against the
// job's; the first trainer of a new external job fixes it.
func (n *Node) admitTrainer(l cudaops.Layout) (trainer.Admission, *trainer.Refusal) {
	spec := n.jobSpec()
	if spec == nil {
		return trainer.Admission{}, &trainer.Refusal{Code: trainer.CodeJobMismatch, Message: "the node has no job yet"}
	}
	if !spec.External() {
		return trainer.Admission{}, &trainer.Refusal{Code: trainer.CodeNotExternal,
			Message: fmt.Sprintf("this node's job trains the built-in model %s; an external trainer needs a mesh started with --model %s", spec.Model, job.ExternalModel)}
	}
	adm := trainer.Admission{Batch: spec.BatchSize, LocalSteps: spec.Steps(), Seed: spec.Seed, Dataset: spec.Dataset}
	x := n.ext
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.layout == nil && x.fileTensors != nil {
		// --init-from a file without a layout: the trainer orders its
		// tensors, the file gives their values.
		if err := sameTensors(x.fileTensors, l); err != nil {
			return trainer.Admission{}, &trainer.Refusal{Code: trainer.CodeLayoutMismatch, Message: err.Error(), Tensor: err.tensor}
		}
		f, err := modelfile.ReadFile(spec.InitFrom)
		var theta []float32
		if err == nil {
			theta, err = InitParamsFor(f, spec.InitFrom, l)
		}
		if err != nil {
			return trainer.Admission{}, &trainer.Refusal{Code: trainer.CodeJobMismatch, Message: err.Error()}
		}
		x.theta0, x.layout, x.waiting = theta, l, ""
		close(x.ready)
		adm.Layout = l
		return adm, nil
	}
	if x.layout == nil {
		x.tentative = l
		adm.Layout, adm.SendInit = l, true
		return adm, nil
	}
	if err := job.CompareLayout(x.layout, l); err != nil {
		var me *job.LayoutMismatchError
		errors.As(err, &me)
		return trainer.Admission{}, &trainer.Refusal{Code: trainer.CodeLayoutMismatch, Message: err.Error(), Tensor: me.Tensor()}
	}
	adm.Layout = x.layout
	return adm, nil
}

// tensorsError is a trainer's layout that does not hold the --init-from
// file's tensors.
type tensorsError struct{ msg, tensor string }

func (e *tensorsError) Error() string { return e.msg }

// sameTensors checks that got holds exactly file's tensors (names and
// shapes), in any order.
func sameTensors(file, got cudaops.Layout) *tensorsError {
	shapes := make(map[string][]int, len(file))
	for _, r := range file {
		shapes[r.Name] = r.Shape
	}
	for _, r := range got {
		want, ok := shapes[r.Name]
		if !ok {
			return &tensorsError{fmt.Sprintf("layout mismatch: tensor %s %v of the trainer is not in the --init-from file", r.Name, r.Shape), r.Name}
		}
		if !slices.Equal(want, r.Shape) {
			return &tensorsError{fmt.Sprintf("layout mismatch at tensor %s: shape %v in the --init-from file, %v in the trainer", r.Name, want, r.Shape), r.Name}
		}
		delete(shapes, r.Name)
	}
	for _, r := range file {
		if _, left := shapes[r.Name]; left {
			return &tensorsError{fmt.Sprintf("layout mismatch: tensor %s %v of the --init-from file is missing in the trainer", r.Name, r.Shape), r.Name}
		}
	}
	return nil
}

// initFromTrainer is trainer.Deps.Init: the first trainer's parameters
// become θ₀ and its layout the job's.
func (n *Node) initFromTrainer(theta []float32) error {
	x := n.ext
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.layout != nil {
		return nil
	}
	if x.tentative == nil || len(theta) != x.tentative.Total() {
		return fmt.Errorf("init of %d parameters without a layout to hold them", len(theta))
	}
	if err := modelfile.CheckFinite(x.tentative, theta); err != nil {
		return fmt.Errorf("the trainer's initial parameters: %w", err)
	}
	x.theta0 = append([]float32(nil), theta...)
	x.layout, x.tentative = x.tentative, nil
	x.waiting = ""
	close(x.ready)
	return nil
}

// layoutFromFile settles a new external job's layout on the bootstrap
// node from --init-from before the trainer socket opens: the file's
// job's layout when it names one. Otherwise the file's tensors wait for
// the first trainer to order them (externalTrainer.fileTensors); spec
// comes back without a layout.
func (n *Node) layoutFromFile(spec JobSpec) (JobSpec, cudaops.Layout, error) {
	l, theta, tensors, err := LoadExternalInitFrom(spec.InitFrom)
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
// from the first trainer that attaches: waited for, with a line saying
// so, and its initial parameters become θ₀. It returns the spec with the
// layout and its shards resolved.
func (n *Node) awaitLayout(ctx context.Context, spec JobSpec) (JobSpec, error) {
	x := n.ext
	if x == nil {
		return spec, fmt.Errorf("--model %s on a new mesh needs --trainer %s (its first trainer fixes the layout) or --init-from FILE", job.ExternalModel, TrainerExternal)
	}
	x.mu.Lock()
	x.waiting = "the job's layout: the first trainer to attach fixes it"
	x.mu.Unlock()
	n.setPhase("waiting-trainer")
	if x.fileTensors != nil {
		n.log.Info("waiting for the first trainer to attach: its order of the --init-from file's tensors becomes the job's layout", "trainer_socket", x.srv.Path())
	} else {
		n.log.Info("waiting for the first trainer to attach: its layout and initial parameters become the job's", "trainer_socket", x.srv.Path())
	}
	select {
	case <-x.ready:
	case <-ctx.Done():
		return spec, fmt.Errorf("no trainer attached before the node was stopped: %w", ctx.Err())
	}
	x.mu.Lock()
	l, theta0 := x.layout, x.theta0
	x.mu.Unlock()
	n.initTheta = theta0
	n.setPhase("joining")
	return n.fixLayout(spec, l)
}

// fixLayout records l as spec's layout, with the shards resolved for it.
func (n *Node) fixLayout(spec JobSpec, l cudaops.Layout) (JobSpec, error) {
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
func (n *Node) runExternal(ctx context.Context, spec JobSpec) {
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-n.ext.attached:
			n.trainWith(ctx, spec, e)
		}
	}
}

func (n *Node) trainWith(ctx context.Context, spec JobSpec, e *trainer.External) {
	n.mu.RLock()
	stopped := n.stopped
	n.mu.RUnlock()
	if stopped != "" {
		e.Close("this node stopped training: " + stopped)
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
	case <-ctx.Done():
		e.Close("node leaving")
	}
	cancel()
	<-done
	w.Leave(n.cfg.LeaveTimeout)
	x := n.ext
	x.mu.Lock()
	x.iters += e.Stats().Iterations
	if x.current == e {
		x.current = nil
	}
	x.mu.Unlock()
	n.mu.Lock()
	if n.worker == w {
		n.worker = nil
	}
	n.mu.Unlock()
}

// errNoTrainer skips an evaluation while the evaluator has no trainer.
var errNoTrainer = fmt.Errorf("%w: no trainer attached to evaluate", eval.ErrNotNow)

// evaluateExternal is the evaluation of an external job: the attached
// trainer evaluates the snapshot (between its update and its next
// compute). Without a trainer the evaluation waits, and /status says so.
func (n *Node) evaluateExternal(ctx context.Context, theta []float32) (cudaops.Eval, error) {
	x := n.ext
	x.mu.Lock()
	e := x.current
	if e == nil || e.Err() != nil {
		if x.waiting == "" {
			n.log.Info("evaluation waits for a trainer to attach")
		}
		x.waiting = "the evaluation: this node is the evaluator"
		x.mu.Unlock()
		return cudaops.Eval{}, errNoTrainer
	}
	x.waiting = ""
	x.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	ev, err := e.Evaluate(ctx, theta)
	if err != nil {
		return cudaops.Eval{}, err
	}
	return cudaops.Eval{Accuracy: ev.Accuracy, Loss: ev.Loss, Samples: int(ev.Samples), Correct: int(ev.Accuracy*float64(ev.Samples) + 0.5)}, nil
}

// status is the trainer socket's record for /status.
func (x *externalTrainer) status() *ExternalTrainerStatus {
	x.mu.Lock()
	defer x.mu.Unlock()
	s := &ExternalTrainerStatus{Socket: x.srv.Path(), Attachments: x.attaches, Iterations: x.iters, Waiting: x.waiting,
		Tensors: len(x.layout), Params: x.layout.Total()}
	if e := x.current; e != nil && e.Err() == nil {
		st := e.Stats()
		s.Attached, s.PID = true, st.PID
		s.Iterations += st.Iterations
		if st.Iterations > 0 {
			it := float64(st.Iterations)
			s.BytesCopiedPerIter = float64(st.ThetaBytes) / it
			s.CopyMicros = float64(st.ThetaNanos) / it / 1e3
			s.RoundTripMicros = float64(st.RoundTripNanos) / it / 1e3
			s.TrainerMicros = float64(st.TrainerNanos) / it / 1e3
		}
	}
	return s
}
