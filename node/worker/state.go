package worker

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"dsspmesh/mesh"
	"dsspmesh/node/records"
	"dsspmesh/shardapi"

	"github.com/prometheus/client_golang/prometheus"
)

// The worker's state and its edges: what every file of the room works on.

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
	// Event records what the mesh did to the worker (a rejected push) and
	// its first round acknowledged, the last step of its node's heal
	// timeline (node/shards' heal.go), timed from Started, the node's
	// start (zero: untimed).
	Event   func(records.Event)
	Started time.Time
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
	Batch int
	// LocalSteps is the job's H (--local-steps): with H > 1 each push is
	// a round of local steps (balance.go, next); 0 and 1 are one
	// gradient a push.
	LocalSteps int
	// AutoSteps (--local-steps auto:LocalSteps) chooses each round's
	// steps from the link, at most LocalSteps (autosteps.go).
	AutoSteps bool
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
	// LeaveTimeout bounds how long a worker that stopped itself takes to
	// leave the shards' gates (Run); 0: DefaultLeaveTimeout.
	LeaveTimeout time.Duration
	// Own is the worker's own optimizer under the combine rule mean
	// (own.go): a push of one step carries its change, not the gradient.
	// Zero: gradients (or rounds, which carry their change already).
	Own Own
}

// DefaultLeaveTimeout is Config.LeaveTimeout's default.
const DefaultLeaveTimeout = 5 * time.Second

func (c Config) leaveTimeout() time.Duration {
	if c.LeaveTimeout > 0 {
		return c.LeaveTimeout
	}
	return DefaultLeaveTimeout
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
	h       int       // the local steps of the round loaded (balance.go, next); 1 without local rounds
	auto    autoSteps // Config.AutoSteps: the next round's steps from the link
	own     *ownStep  // Config.Own's state; nil without it
	started bool      // the worker computed its first gradient (noteStart)
	// step holds the loop's decisions and what they read: the clocks per
	// shard, the versions of θ's slices (step.go).
	step     *Step
	assigned [4]*shardapi.Assignment // the assignments shard 0's last two landed OKs named (pipeline.go)
	done     chan struct{}           // closed when Run returns; clients are then free
	left     bool                    // Run took the worker out of the gates (leaveGates); written before done closes, read after
	lends    chan lendRequest        // an evaluation asking to borrow θ (lend.go)

	mu    sync.Mutex // guards stats, rate, halt
	stats records.LocalWorker
	halt  context.CancelFunc // ends Run's loop (Stop)
	rate  []time.Time        // completion times of recent iterations
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
	w.stats.LocalSteps = max(cfg.LocalSteps, 1)
	w.auto.max = cfg.LocalSteps
	if cfg.Own.On() {
		w.own = &ownStep{Own: cfg.Own}
	}
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

// fail stops the worker for err: Run returns after it, and /status says
// why (Stopped, unless [Worker.Stop] named a reason first).
func (w *Worker) fail(err error) {
	w.mu.Lock()
	w.stats.LastError = err.Error()
	if w.stats.Stopped == "" {
		w.stats.Stopped = err.Error()
	}
	w.mu.Unlock()
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

// Lending θ to the evaluation (node/eval/loop.go). An evaluation reads the whole
// model into memory of its own and evaluates it there, beside the worker's
// θ: for a model of at least a size the node chooses that second copy is what decides
// the evaluating node's peak memory (a 100 MB model's evaluator held 7× the
// model where the others held 6×). So for such a model the evaluation
// borrows the worker's θ instead: at the top of an iteration, with no push
// in flight, the worker hands θ over and waits; the evaluation reads the
// model into it, evaluates, saves its checkpoint and hands θ back with the
// version of every slice it read, which the worker then computes on as if
// a push's OK had brought them — a linearizable read after its last OK is
// at least as fresh as that OK (docs/design.md, "The read guarantee"),
// and a slice last read outside the gate stays marked so. A shard whose
// read failed keeps its old version: its values are that
// version's or newer ones. The worker computes nothing while θ is lent;
// the evaluation computes in its place. The evaluated snapshot, for
// GET /model.safetensors?evaluated, is written to the data dir
//  before θ goes back: a model's bytes more on disk, none
// in memory.

// lendRequest is the evaluation asking for θ: the loop sends θ on theta,
// then waits on back for the versions read into it (nil for a shard whose
// read failed).
type lendRequest struct {
	theta chan<- []float32
	back  <-chan []*shardapi.Version
}
