package shardapi

import (
	"dsspmesh/clock"
	"dsspmesh/mesh"
	"time"
)

// Applied reports one applied entry to an observer (tests, metrics).
type Applied struct {
	Index  uint64
	Kind   string // "init", "push", "add-worker", "remove-worker", "rejected"
	Pushes []PushResult
	Worker clock.WorkerID
	// StartClock is the clock an AddWorker placed the worker at.
	StartClock int64
	// Released are the workers a RemoveWorker, or an AddWorker that
	// advanced a present worker, released.
	Released []clock.Release
	// Suspected marks a "remove-worker" that was a suspension: the
	// leader found the worker silent and disconnected (shard/suspect.go);
	// it comes back through AddWorker. A suspension that found the worker
	// moved on applies as Kind "suspect" and changes nothing.
	Suspected bool
	Err       error
	// StateHash is StateHash() after this entry, set only at the indices
	// Deps.HashEvery asks for (zero otherwise).
	StateHash [32]byte
	// NonFinite counts the NaN or ±Inf parameters (and velocities) after
	// this entry, at the same indices as StateHash; always 0 unless a
	// broken build let one in.
	NonFinite int
	// Diverged is set on the Applied at which this replica found it
	// diverged (the agreement check, docs/design.md "Replicas agree"); it
	// applies nothing after it. Kind is then "" when the entry itself was
	// not applied (its copy of the entry was damaged).
	Diverged *Divergence
}

// Divergence is why a replica stopped: its state is not the one a
// majority of the shard's voters hold, or its log is damaged. It stops
// voting and serving and is rebuilt from its peers once the leader has
// evicted it.
type Divergence struct {
	// At is the index of the check that found it (its digest's index), or
	// of the entry its log holds damaged.
	At uint64
	// Damaged: its own copy of an entry failed its checksum (raftstore);
	// otherwise its digest differed from the majority's.
	Damaged bool
	Reason  string
}

// PushResult is what Apply did with one push of a batch.
type PushResult struct {
	PushMeta
	RecvNanos int64 // the leader's receipt time, as in the entry
	// Applied: the gradient went into the parameters; Outcome is the gate's.
	Applied bool
	// Duplicate: (Worker, Iter) was applied before; nothing changed.
	Duplicate bool
	Outcome   clock.Outcome
	Err       error // a *RejectError, nothing changed
}

// Status is a read-only view for metrics and /status.
type Status struct {
	Shard        uint32
	Initialized  bool
	Spec         Spec
	AppliedIndex uint64
	Samples      int64
	Pushes       uint64
	Duplicates   uint64
	Rejected     map[string]uint64
	Min, Max     int64
	Workers      []clock.WorkerInfo
	Gate         clock.Stats
	// Evaluator is the worker the evaluation lease names by this shard's
	// gate (authoritative on shard 0: docs/design.md, "The evaluator").
	Evaluator string
}

// ReplicaStatus is Status plus raft's view.
type ReplicaStatus struct {
	Status
	ID        mesh.NodeID
	State     string // raft state: Leader, Follower, Candidate, Shutdown
	Term      uint64
	Leader    mesh.NodeID
	Held      int // replies held by the gate on this replica
	Service   ServiceStats
	LastIndex uint64 // raft's last log index
	// LogWrites counts the writes to the replica's raft log since it
	// opened: one fsynced transaction each on disk, however many entries.
	LogWrites uint64
	// Diverged is set once this replica found it diverged (it then no
	// longer votes or serves); Evicted once the leader has removed it from
	// the shard, so that its node may rebuild it from its peers.
	Diverged *Divergence
	Evicted  bool
	// Checks is the agreement check's view: the last settled check.
	Checks CheckStatus
	// CommitIndex is raft's commit index as this replica knows it (a
	// follower learns it from its leader): AppliedIndex reaching it is
	// a new replica caught up.
	CommitIndex uint64
	// Restored counts the snapshots the replica's state was restored from
	// since it opened (one sent by its leader, or its own at a restart).
	Restored Restores
}

// Restores counts a replica's snapshot restores.
type Restores struct {
	Count uint64    // snapshots restored since the replica opened
	Bytes int64     // the last one's size
	At    time.Time // when the last one was restored (the wall clock; not state)
}

// CheckStatus is the agreement check as one replica applied it.
type CheckStatus struct {
	At      uint64        // index of the last settled check's digest (0: none yet)
	Settled uint64        // checks settled since the replica opened (a majority shared a digest)
	Matched uint64        // of them, checks this replica's own digest was compared and agreed
	Named   []mesh.NodeID // replicas named diverged and not yet evicted
}

// ServiceStats count what the push service did since start.
type ServiceStats struct {
	Requests     uint64 // frames received
	Batches      uint64 // push entries proposed
	EntryBytes   uint64 // bytes of those entries (each replicated to every follower)
	SummedPushes uint64 // pushes that travelled in a summed group (one gradient for several)
	// RegroupedPushes counts the pushes of summed groups the FSM did not
	// apply (another push of the group could not be) that the leader
	// proposed again itself.
	RegroupedPushes  uint64
	ProposedPushes   uint64 // pushes in them
	Rejected         uint64 // pushes answered with a rejection (here or by the FSM)
	NotLeader        uint64 // requests answered NotLeader
	Held             uint64 // pushes the gate held at least once
	Acked            uint64 // OK replies to pushes
	PendingFrames    uint64 // Pending keep-alives sent (pushes queued or replicating past a keep-alive period)
	StreamsAccepted  uint64
	StreamErrorsRecv uint64 // streams closed on a receive error (bad frames included)
	// ReplyWriteTimeouts counts streams dropped because a reply waited
	// longer than Config.ReplyWriteTimeout for its worker to read it.
	ReplyWriteTimeouts uint64
	// Refused counts, per worker, the gradients this replica refused as
	// its leader before proposing them (NaN/Inf, norm outliers).
	Refused map[clock.WorkerID]WorkerRefusals
}

// RepeatOffender is the streak of consecutive refused pushes after which a
// worker is reported as one that keeps sending bad gradients.
const RepeatOffender = 3

// WorkerRefusals counts the gradients the leader refused from one worker.
type WorkerRefusals struct {
	NonFinite uint64 // pushes with NaN or ±Inf
	Outliers  uint64 // pushes whose norm was an outlier
	// Streak is the number of refusals since the worker's last accepted
	// push; ≥ RepeatOffender means it keeps sending them.
	Streak uint64
}

// Slice is a linearizable read of one shard: its parameter slice and clocks
// as of a Raft barrier on its leader, so every push committed before the
// read began is in it.
type Slice struct {
	Shard    uint32
	Leader   mesh.NodeID // the replica that answered
	Params   []float32
	Min, Max int64  // t_min and t_max of the shard's clock table
	Index    uint64 // the applied index the slice is at
	Samples  int64  // samples applied to the shard
}

// Configuration is a shard's raft configuration as one replica knows it:
// the latest one in its log, committed or not.
type Configuration struct {
	Voters    []mesh.NodeID
	Nonvoters []mesh.NodeID // being caught up before promotion
}

// Has reports whether id is in the configuration, voting or not.
func (c Configuration) Has(id mesh.NodeID) bool {
	for _, l := range [][]mesh.NodeID{c.Voters, c.Nonvoters} {
		for _, x := range l {
			if x == id {
				return true
			}
		}
	}
	return false
}
