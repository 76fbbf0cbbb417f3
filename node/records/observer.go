package records

import (
	"time"

	"dsspmesh/mesh"
	"dsspmesh/shardapi"
)

// SliceRead is the version of one shard's slice of a worker's parameters.
type SliceRead struct {
	shardapi.Version
	// Unchecked: the slice was not read through the gate by the OK of a
	// push before the iteration it serves (the one before, or under
	// --pipeline the one before that) — it is join's fetch, or was read
	// for a lower clock before align moved this shard's clock forward — so
	// the read guarantee's bound does not cover it.
	Unchecked bool
}

// Observer is told what this node's worker and replicas do, for the debug
// history of the fault checkers. Calls come from the worker's push
// goroutines and the replicas' apply and leadership goroutines at once;
// each must be quick and must not call back into the node.
type Observer interface {
	// PushSent: the worker sends push (worker, iter) of samples to shard.
	PushSent(shard uint32, worker mesh.NodeID, iter, samples int64)
	// PushDone: that push returned, with err nil when acknowledged.
	PushDone(shard uint32, worker mesh.NodeID, iter, samples int64, err error)
	// Computing: the worker computes iteration iter on parameters whose
	// slice of shard s is of version reads[s].Version (docs/design.md, "The
	// read guarantee"). reads is the caller's: copy what you keep. share,
	// under the balance layer, is the slice of the job's data order the
	// iteration reads as its share of the global batch (shard 0's
	// assignment); nil when the worker reads a batch of its own.
	Computing(worker mesh.NodeID, iter int64, reads []SliceRead, share *shardapi.Assignment)
	// Applied: this node's replica of shard applied an entry. It runs under
	// the state machine's lock (shard.NewFSM's contract).
	Applied(shard uint32, a shardapi.Applied)
	// Leading: this node's replica of shard leads term (once per term).
	Leading(shard uint32, term uint64)
	// StateHashEvery > 0 asks the replicas to put the state hash into the
	// Applied of every index it divides.
	StateHashEvery() uint64
}

// NoObserver records nothing.
type NoObserver struct{}

func (NoObserver) PushSent(uint32, mesh.NodeID, int64, int64)                      {}
func (NoObserver) PushDone(uint32, mesh.NodeID, int64, int64, error)               {}
func (NoObserver) Computing(mesh.NodeID, int64, []SliceRead, *shardapi.Assignment) {}
func (NoObserver) Applied(uint32, shardapi.Applied)                                {}
func (NoObserver) Leading(uint32, uint64)                                          {}
func (NoObserver) StateHashEvery() uint64                                          { return 0 }

// Event kinds in the Events of a node's /status (node/status.Status).
const (
	EventJoin        = "join"     // a member joined or came back
	EventLeave       = "leave"    // a member left gracefully
	EventFailed      = "failed"   // a member stopped answering and was declared dead
	EventSuspect     = "suspect"  // gossip suspects a member (it may refute it)
	EventLeader      = "leader"   // a shard has a new leader or term
	EventNodeRevoked = "revoked"  // an operator revoked a node (dssp revoke)
	EventRejected    = "rejected" // a shard refused this node's push, or gossip refused a peer
	// A shard lost its quorum (Detail names the voters it waits for) or
	// regained it (a leader again).
	EventQuorumLost     = "quorum-lost"
	EventQuorumRegained = "quorum-regained"
	// This node's replica of a shard placed here after the node started
	// could not start (Detail: why; a damaged store names the file and
	// the remedy); the node goes on without it.
	EventReplicaRefused = "replica-refused"
	// This node's replica of a shard diverged (the agreement check: its
	// state is not the one a majority of the voters hold, or its log is
	// damaged; Detail: the index and why): it stopped voting and serving
	// and is rebuilt from its peers once the leader evicts it.
	EventReplicaDiverged = "replica-diverged"
	// This node re-evaluated an evaluator's claim (node/eval's audit.go)
	// and measured an accuracy beyond the claim's sampling noise (Node:
	// the evaluator; Detail: both accuracies, the sequence and digest).
	EventAuditDisagrees = "eval-audit-disagrees"
	// EventHeal is a step of a replica's heal timeline (node/shards,
	// heal.go) or the node's first round acknowledged.
	EventHeal = "heal"
)

// Event is one thing that happened to the mesh, as this node saw it.
type Event struct {
	At   time.Time `json:"at"`
	Kind string    `json:"kind"`
	// Node is the member concerned: who joined, left, failed or is
	// suspected; the new leader; the worker whose push was rejected.
	Node   string  `json:"node,omitempty"`
	Shard  *uint32 `json:"shard,omitempty"`
	Term   uint64  `json:"term,omitempty"`
	Detail string  `json:"detail,omitempty"`
	// Reason is a rejection's shardapi.Reason (its log lines are paced
	// per reason).
	Reason string `json:"reason,omitempty"`
}
