package trainer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"dsspmesh/cudaops"
	"dsspmesh/modelfile"
	"dsspmesh/node/job"
	"dsspmesh/node/records"
)

// HostDeps are what a [Host] asks of the node.
type HostDeps struct {
	// Socket is the socket's path (<data-dir>/trainer.sock); Node the
	// node's id, told in welcome.
	Socket, Node string
	// Job is the node's job spec; nil while it has none.
	Job func() *job.Spec
	// Layout is the job's layout when it is known at start; nil while a
	// new external job waits for its first trainer to fix it.
	Layout cudaops.Layout
	// FileTensors are the --init-from file's tensors when the file names
	// no layout: the first trainer orders them (nil: none).
	FileTensors cudaops.Layout
	Logger      *slog.Logger
}

// Host is the node's side of --trainer external: the trainer socket
// ([Server]), the job's layout as trainers are checked against it (the
// first trainer of a new external job fixes it), the attachments handed
// to the node's worker lifecycle ([Host.Attached]), the evaluation by the
// attached trainer and the socket's record for /status. Its mu is
// innermost: taken under no other lock, held across no call.
type Host struct {
	d        HostDeps
	srv      *Server
	attached chan *External // Deps.Attached → the node's worker lifecycle
	ready    chan struct{}  // closed once layout is known

	mu        sync.Mutex
	layout    cudaops.Layout // the job's; nil while a new external job waits for its first trainer
	tentative cudaops.Layout // the layout of the trainer admitted to fix it, until its init
	theta0    []float32      // that trainer's initial parameters
	attaches  int
	iters     uint64 // updates of the attachments that ended
	waiting   string
	current   *External
}

// ErrNoTrainer is [Host.Evaluate]'s error while no trainer is attached.
var ErrNoTrainer = errors.New("no trainer attached to evaluate")

// NewHost listens on d.Socket; [Host.Serve] serves it. An attachment
// made once ctx has ended is closed ("node leaving").
func NewHost(ctx context.Context, d HostDeps) (*Host, error) {
	h := &Host{d: d, attached: make(chan *External, 1), ready: make(chan struct{}), layout: d.Layout}
	if d.Layout != nil {
		close(h.ready)
	}
	srv, err := Listen(Config{Socket: d.Socket}, Deps{
		Node: d.Node, Admit: h.admit, Init: h.init, Logger: d.Logger,
		Attached: func(e *External) {
			h.mu.Lock()
			h.attaches++
			h.current = e
			h.mu.Unlock()
			select {
			case h.attached <- e:
			case <-ctx.Done():
				e.Close("node leaving")
			}
		},
	})
	if err != nil {
		return nil, err
	}
	h.srv = srv
	return h, nil
}

// Serve is [Server.Serve]; Path the socket's; Close [Server.Close].
func (h *Host) Serve(ctx context.Context) { h.srv.Serve(ctx) }
func (h *Host) Path() string              { return h.srv.Path() }
func (h *Host) Close(reason string)       { h.srv.Close(reason) }

// Attached hands over each admitted trainer: the node runs its worker on
// it until [External.Done], then calls [Host.Detached].
func (h *Host) Attached() <-chan *External { return h.attached }

// Detached counts a finished attachment's updates.
func (h *Host) Detached(e *External) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.iters += e.Stats().Iterations
	if h.current == e {
		h.current = nil
	}
}

// admit is Deps.Admit: the trainer's layout against the job's; the first
// trainer of a new external job fixes it.
func (h *Host) admit(l cudaops.Layout) (Admission, *Refusal) {
	spec := h.d.Job()
	if spec == nil {
		return Admission{}, &Refusal{Code: CodeJobMismatch, Message: "the node has no job yet"}
	}
	if !spec.External() {
		return Admission{}, &Refusal{Code: CodeNotExternal,
			Message: fmt.Sprintf("this node's job trains the built-in model %s; an external trainer needs a mesh started with --model %s", spec.Model, job.ExternalModel)}
	}
	adm := Admission{Batch: spec.BatchSize, LocalSteps: spec.Steps(), Seed: spec.Seed, Dataset: spec.Dataset,
		Update: UpdateGradient, Optimizer: WireOptimizer{Kind: spec.Optimizer, LR: spec.LR, Momentum: spec.Momentum},
		Wire: spec.Precision().String()}
	if spec.Deltas() {
		adm.Update = UpdateDelta
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.layout == nil && h.d.FileTensors != nil {
		// --init-from a file without a layout: the trainer orders its
		// tensors, the file gives their values.
		if err := sameTensors(h.d.FileTensors, l); err != nil {
			return Admission{}, &Refusal{Code: CodeLayoutMismatch, Message: err.Error(), Tensor: err.tensor}
		}
		f, err := modelfile.ReadFile(spec.InitFrom)
		var theta []float32
		if err == nil {
			theta, err = job.InitParamsFor(f, spec.InitFrom, l)
		}
		if err != nil {
			return Admission{}, &Refusal{Code: CodeJobMismatch, Message: err.Error()}
		}
		h.theta0, h.layout, h.waiting = theta, l, ""
		close(h.ready)
		adm.Layout = l
		return adm, nil
	}
	if h.layout == nil {
		h.tentative = l
		adm.Layout, adm.SendInit = l, true
		return adm, nil
	}
	if err := job.CompareLayout(h.layout, l); err != nil {
		var me *job.LayoutMismatchError
		errors.As(err, &me)
		return Admission{}, &Refusal{Code: CodeLayoutMismatch, Message: err.Error(), Tensor: me.Tensor()}
	}
	adm.Layout = h.layout
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

// init is Deps.Init: the first trainer's parameters become θ₀ and its
// layout the job's.
func (h *Host) init(theta []float32) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.layout != nil {
		return nil
	}
	if h.tentative == nil || len(theta) != h.tentative.Total() {
		return fmt.Errorf("init of %d parameters without a layout to hold them", len(theta))
	}
	if err := modelfile.CheckFinite(h.tentative, theta); err != nil {
		return fmt.Errorf("the trainer's initial parameters: %w", err)
	}
	h.theta0 = append([]float32(nil), theta...)
	h.layout, h.tentative = h.tentative, nil
	h.waiting = ""
	close(h.ready)
	return nil
}

// AwaitLayout waits, with a line saying so, for the first trainer to fix
// a new external job's layout, and returns it with its initial
// parameters (θ₀; those of --init-from when the file gave them).
func (h *Host) AwaitLayout(ctx context.Context) (cudaops.Layout, []float32, error) {
	h.mu.Lock()
	h.waiting = "the job's layout: the first trainer to attach fixes it"
	h.mu.Unlock()
	if h.d.FileTensors != nil {
		h.d.Logger.Info("waiting for the first trainer to attach: its order of the --init-from file's tensors becomes the job's layout", "trainer_socket", h.srv.Path())
	} else {
		h.d.Logger.Info("waiting for the first trainer to attach: its layout and initial parameters become the job's", "trainer_socket", h.srv.Path())
	}
	select {
	case <-h.ready:
	case <-ctx.Done():
		return nil, nil, fmt.Errorf("no trainer attached before the node was stopped: %w", ctx.Err())
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.layout, h.theta0, nil
}

// Evaluate is the evaluation of an external job: the attached trainer
// evaluates the snapshot (between its update and its next compute).
// Without a trainer it returns ErrNoTrainer at once, and /status says the
// evaluation waits.
func (h *Host) Evaluate(ctx context.Context, theta []float32) (cudaops.Eval, error) {
	h.mu.Lock()
	e := h.current
	if e == nil || e.Err() != nil {
		if h.waiting == "" {
			h.d.Logger.Info("evaluation waits for a trainer to attach")
		}
		h.waiting = "the evaluation: this node is the evaluator"
		h.mu.Unlock()
		return cudaops.Eval{}, ErrNoTrainer
	}
	h.waiting = ""
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	ev, err := e.Evaluate(ctx, theta)
	if err != nil {
		return cudaops.Eval{}, err
	}
	return cudaops.Eval{Accuracy: ev.Accuracy, Loss: ev.Loss, Samples: int(ev.Samples), Correct: int(ev.Accuracy*float64(ev.Samples) + 0.5)}, nil
}

// Status is the trainer socket's record for /status.
func (h *Host) Status() *records.ExternalTrainer {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := &records.ExternalTrainer{Socket: h.srv.Path(), Attachments: h.attaches, Iterations: h.iters, Waiting: h.waiting,
		Tensors: len(h.layout), Params: h.layout.Total()}
	if e := h.current; e != nil && e.Err() == nil {
		st := e.Stats()
		s.Attached, s.PID, s.LR = true, st.PID, st.LR
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
