package shards

import (
	"context"
	"crypto/ed25519"
	"time"

	"dsspmesh/clock"
	"dsspmesh/mesh"
	"dsspmesh/shardapi"
)

// Replicas opens this node's replicas of the job's shards (on a node:
// shard.Replica over raftstore's bbolt stores and the mesh transport).
type Replicas interface {
	// HasState reports whether shard id has Raft state here from an
	// earlier run, so its replica must start whatever placement says.
	HasState(id uint32) bool
	// Discard removes shard id's Raft state here (its replica shut down):
	// the remedy of a replica that diverged and was evicted, which then
	// opens afresh and is caught up by the leader.
	Discard(id uint32) error
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
	// Diverged is told once that the replica diverged (the agreement
	// check; it has stopped voting and serving), Evicted once the leader
	// evicted it, so that it may be discarded and opened afresh.
	Diverged func(shardapi.Divergence)
	Evicted  func()
	// EntryBytes is the bytes of this shard's slice in the job's wire
	// precision, the size of a one-push entry: the replicas may size
	// their Raft timing to it (shard.Config.ForEntryBytes).
	EntryBytes int64
	// RTT is the longest round trip measured from this node to the
	// other replicas placement gives the shard when it opens (0: none
	// measured): the replicas may size their Raft timing to it
	// (shard.Config.ForRTT).
	RTT time.Duration
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
	// Identities is the shard's replicated identity state as this
	// replica applied it: revoked ids, pinned keys of legacy ids.
	Identities() shardapi.Identities
	// Pin records key for the legacy id unless one is pinned (leader
	// only; a pin of another key is a *shardapi.RejectError).
	Pin(ctx context.Context, id mesh.NodeID, key ed25519.PublicKey) error
	// Shutdown stops the replica and closes its stores. Idempotent.
	Shutdown() error
}
