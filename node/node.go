package node

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"dsspmesh/cudaops"
	"dsspmesh/mesh"
	"dsspmesh/node/datadir"
	"dsspmesh/node/eval"
	"dsspmesh/node/job"
	"dsspmesh/node/records"
	"dsspmesh/node/shards"
	"dsspmesh/node/status"
	"dsspmesh/node/trainer"
	"dsspmesh/node/trust"
	"dsspmesh/shardapi"
)

// Node is one running dssp process. Build it with [Run].
type Node struct {
	// stopRun ends Run with a cause (a revocation of this node).
	stopRun  context.CancelCauseFunc
	cfg      Config
	log      *slog.Logger
	id       mesh.NodeID
	dir      *datadir.Dir
	tr       mesh.Transport
	members  mesh.Membership
	replicas shards.Replicas
	obs      records.Observer // never nil
	now      func() time.Time // the wall clock (Deps.Now)
	metrics  *status.Metrics
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
	spec  *job.Spec
	phase string
	// stopped says why this node stopped training (a divergence it saw
	// itself); "" while it trains or never did.
	stopped string

	claims *eval.Claims // the evaluations held and received (node/eval)
	trust  *trust.Trust // revoked ids and pinned keys (node/trust)
}

func (n *Node) setPhase(p string) { n.mu.Lock(); n.phase = p; n.mu.Unlock() }

func (n *Node) setSpec(s job.Spec) { n.mu.Lock(); n.spec = &s; n.mu.Unlock() }

func (n *Node) jobSpec() *job.Spec {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.spec
}

// workerLoop is what the node asks of its worker room ([worker.Worker]).
type workerLoop interface {
	Run(ctx context.Context)
	Leave(limit time.Duration)
	Status() *records.LocalWorker
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
