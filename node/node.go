package node

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"dsspmesh/cudaops"
	"dsspmesh/mesh"
	"dsspmesh/node/eval"
	"dsspmesh/node/shards"
	"dsspmesh/node/status"
	"dsspmesh/node/trainer"
	"dsspmesh/node/trust"
	"dsspmesh/shardapi"
)

// Node is one running dssp process. Build it with [Run].
type Node struct {
	cfg      Config
	log      *slog.Logger
	id       mesh.NodeID
	dir      *DataDir
	tr       mesh.Transport
	members  mesh.Membership
	replicas Replicas
	obs      Observer         // never nil
	now      func() time.Time // the wall clock (Deps.Now)
	metrics  *Metrics
	httpAddr string // where this node serves HTTP as peers reach it (advertisedHTTP); "" without Deps.HTTP
	started  time.Time
	wg       sync.WaitGroup

	model       *cudaops.Model
	evalModel   *cudaops.Model
	train, test cudaops.Dataset
	memLimit    int64 // the soft memory limit set (node/memlimit); 0 = none

	shards *shards.Manager
	worker workerLoop // nil when the node does not train (or, with an external trainer, none is attached)
	events *status.EventLog
	view   status.View

	// layout is the model's tensors in the flat vector: the built-in
	// model's, or an external job's (JobSpec.Layout).
	layout    cudaops.Layout
	ext       *trainer.Host // --trainer external: the trainer socket; nil otherwise
	extDone   chan struct{} // closed when runExternal's worker has left; nil without one
	initTheta []float32     // θ from --init-from (or an external job's first trainer) for a fresh mesh; nil: from the seed
	snaps     *eval.Room    // model snapshots, the evaluation, checkpoints

	mu    sync.RWMutex
	spec  *JobSpec
	phase string
	eval  *EvalResult
	evals []EvalResult // the last evalHistorySize evaluations, oldest first
	// stopped says why this node stopped training (a divergence it saw
	// itself); "" while it trains or never did.
	stopped string

	claims evalClaims // the evaluations received and how they were judged (eval.go)

	trust *trust.Trust // revoked ids and pinned keys (node/trust)
}

// evalHistorySize bounds the evaluations kept for the dashboard's charts.
const evalHistorySize = 360

func (n *Node) setPhase(p string) { n.mu.Lock(); n.phase = p; n.mu.Unlock() }

func (n *Node) setSpec(s JobSpec) { n.mu.Lock(); n.spec = &s; n.mu.Unlock() }

func (n *Node) jobSpec() *JobSpec {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.spec
}

// workerLoop is what the node asks of its worker room ([worker.Worker]).
type workerLoop interface {
	Run(ctx context.Context)
	Leave(limit time.Duration)
	Status() *LocalWorker
	Stop(reason string)
	Borrow(ctx context.Context) (theta []float32, giveBack func([]*shardapi.Version), ok bool)
	Finished() bool
}

// isMember reports whether id is in this node's membership view.
func (n *Node) isMember(id mesh.NodeID) bool {
	for _, m := range n.members.Members() {
		if m.ID == id {
			return true
		}
	}
	return false
}

// evalClaims counts the evaluations received from peers that were not
// taken, and limits the WARN lines they cause.
type evalClaims struct {
	mu        sync.Mutex
	dropped   uint64
	warned    time.Time
	checking  bool      // a divergence check runs
	checkedAt time.Time // when the last one started
	// check reads the parameters and says whether they diverged (nil:
	// checkParameters); a field only for tests.
	check func(ctx context.Context) (bool, string, error)
	// bound replaces seqBound's answer; a field only for tests.
	bound func() (uint64, bool)
}
