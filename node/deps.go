package node

import (
	"context"
	"log/slog"
	"net"
	"time"

	"dsspmesh/clock"
	"dsspmesh/mesh"
	"dsspmesh/shardapi"
)

// Deps are a node's edges to the world, built by the caller (the dssp
// command through node/assemble; tests with mesh's in-memory transport and
// membership). [Run] owns them from the call on: it closes Dir, Transport,
// HTTP and an Observer that is an io.Closer, and shuts Membership down,
// before it returns, error or not.
type Deps struct {
	// Dir is the node's open data directory; Dir.ID is the node's id.
	Dir *DataDir
	// Transport carries pushes, Raft and the control channel; its LocalID
	// is Dir.ID.
	Transport mesh.Transport
	// Membership is the gossip view; its local Meta names Transport's
	// address. Run joins through it (Config.Join or the persisted peers).
	Membership mesh.Membership
	// Replicas opens this node's replica of a shard.
	Replicas Replicas
	// HTTP, if set, serves /metrics, /status and the dashboard.
	HTTP net.Listener
	// Observer, if set, sees every push of the worker, every entry the
	// replicas apply and every term they lead (the debug history).
	Observer Observer
	Logger   *slog.Logger
	// InitParams are the parameters of Config.Spec.InitFrom (LoadInitFrom),
	// read before the data dir was opened; Run reads the file itself when
	// they are nil and InitFrom is set.
	InitParams []float32
	// Now reads the wall clock for the times the node reports (/status,
	// the event record, evaluations, peers last seen); nil is time.Now.
	// Durations are measured on Go's monotonic clock regardless.
	Now func() time.Time
}

// Replicas opens this node's replicas of the job's shards (on a node:
// shard.Replica over raftstore's bbolt stores and the mesh transport).
type Replicas interface {
	// HasState reports whether shard id has Raft state here from an
	// earlier run, so its replica must start whatever placement says.
	HasState(id uint32) bool
	// Open starts this node's replica of shard id, reporting through hooks.
	Open(id uint32, hooks ReplicaHooks) (Replica, error)
}

// ReplicaHooks are what a replica reports to its node; a nil func is not
// called. None may block or call back into the replica.
type ReplicaHooks struct {
	// Applied sees every entry applied, under the state machine's lock.
	Applied func(shardapi.Applied)
	// StateHashEvery > 0 puts the state hash into the Applied of every
	// index it divides.
	StateHashEvery uint64
	// Leading is called once per term this replica leads.
	Leading func(term uint64)
	// ApplyTime sees, on the leader, how long each batch of pushes took
	// from proposal to application (quorum commit and state machine).
	ApplyTime func(time.Duration)
	// AllowRaftPeer vouches for a peer outside the shard's latest Raft
	// configuration that may still open raft streams (see
	// shard.Deps.AllowRaftPeer); nil vouches for none.
	AllowRaftPeer func(mesh.NodeID) bool
	// Groups is how many Raft groups this node hosts with this one, by
	// placement when it opens: the replicas may size their Raft timing to
	// it (shard.Config.ForGroups).
	Groups int
	// EntryBytes is the bytes of this shard's slice in the job's wire
	// precision, the size of a one-push entry: the replicas may size
	// their Raft timing to it (shard.Config.ForEntryBytes).
	EntryBytes int64
}

// Replica is this node's member of one shard's Raft group: the subset of
// shard.Replica the node uses. Methods are safe for concurrent use;
// leader-only ones return an error wrapping shardapi.ErrNotLeader
// elsewhere.
type Replica interface {
	// Bootstrap makes voters the first configuration of a shard that has
	// never run.
	Bootstrap(voters []mesh.NodeID) error
	// Init proposes the shard's spec and initial parameters (leader only).
	Init(ctx context.Context, spec shardapi.Spec, theta []float32) error
	IsLeader() bool
	// LeaderChanged is closed at the next change of this replica's Raft
	// state or known leader; read IsLeader after taking it.
	LeaderChanged() <-chan struct{}
	// Reconcile moves the Raft configuration one step toward desired
	// (leader only; shardapi.ErrReconfigActive while a step runs).
	Reconcile(ctx context.Context, desired []mesh.NodeID) (done bool, err error)
	// RemoveWorker drops w from the shard's clock table (leader only).
	RemoveWorker(ctx context.Context, w clock.WorkerID) error
	Status() shardapi.ReplicaStatus
	Configuration() (shardapi.Configuration, error)
	// TransferLeadership hands leadership to voter to, or with to empty
	// to the most up-to-date other voter (leader only).
	TransferLeadership(to mesh.NodeID) error
	// Shutdown stops the replica and closes its stores. Idempotent.
	Shutdown() error
}
