package shard

import (
	"fmt"
	"time"

	"dsspmesh/mesh"
)

// Config tunes one replica of one shard.
type Config struct {
	Shard uint32
	ID    mesh.NodeID // this node: its raft server id and address

	// Raft timers (see raft.Config). Defaults suit a LAN mesh.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration

	// Log bounds. Push entries are as large as the shard's slice times the
	// pushes batched in them (a quarter of a megabyte for the MLP, tens of
	// megabytes for a 100 MB model), so the log is bounded by bytes: the
	// replica measures the entries it stores and keeps raft's entry counts
	// at SnapshotThreshold = LogBytes / mean entry and TrailingLogs =
	// TrailingBytes / mean entry (see logBudget), never above the counts
	// below, which are the bounds while nothing is measured yet (and the
	// only ones when LogBytes is 0). The log on disk (and the bbolt file,
	// which grows to the largest log it held) is then about LogBytes +
	// TrailingBytes plus what arrives within one SnapshotInterval;
	// snapshots (the slice and its optimizer state, about two one-push
	// entries) are checked every SnapshotInterval. A follower further
	// behind than the trailing entries is sent a snapshot.
	SnapshotInterval  time.Duration
	SnapshotThreshold uint64
	TrailingLogs      uint64
	LogBytes          int64
	TrailingBytes     int64
	// MaxAppendEntries bounds the entries in one AppendEntries RPC.
	MaxAppendEntries int

	// Batching: concurrent pushes queued at the leader go into one entry,
	// up to MaxBatchPushes pushes or MaxBatchBytes of gradients, while at
	// most MaxInflightBatches entries are proposed and not yet applied.
	// One in flight is the default: pushes that arrive while an entry
	// replicates wait for it and share (and sum into) the next, so a
	// contended shard writes, sends and applies fewer entries; with four in
	// flight each push was its own entry (1.0 pushes an entry, 3-replica
	// pushes 0.36–0.44 of an unreplicated echo against 0.58–0.61 with one,
	// both orders of one A/B run; the 4-node mesh's samples/s did not move).
	MaxBatchPushes     int
	MaxBatchBytes      int
	MaxInflightBatches int
	// BatchLinger is how long the proposer, holding fewer pushes than the
	// shard has workers and finding the queue empty, waits for more before
	// it proposes; it stops as soon as the batch holds one push per worker
	// (or a batch limit). Workers a gate releases together push within a
	// few milliseconds of one another, and without the wait the first push
	// after an idle moment went alone into its own entry. 0 proposes at
	// once. See DefaultBatchLinger for what it bought.
	BatchLinger time.Duration
	// SumBatches makes the leader send the pushes of a batch that the gate
	// will take as one summed gradient (aggregate.go).
	SumBatches bool

	// ApplyTimeout bounds the wait to enqueue a proposal.
	ApplyTimeout time.Duration
	// HeldKeepAlive is the period of Held frames while a push is held, and
	// of the check that this replica still leads.
	HeldKeepAlive time.Duration
	// IdleStreamTimeout closes a worker's stream that sent nothing for
	// this long while none of its pushes was held (a dead or stuck peer
	// holding a stream open); the worker's client reopens one on its next
	// push. It must exceed HeldKeepAlive.
	IdleStreamTimeout time.Duration
	// ReplyWriteTimeout bounds how long a reply frame may wait for its
	// worker to read it, plus the frame's time at shardapi.MinReplyRate;
	// then the stream is dropped and the worker resends (dedupe answers).
	// A worker that keeps a stream open without reading it (its client
	// moved to another replica, its process paused) would otherwise hold
	// the goroutine that answers it — the evaluator, which answers every
	// released push of the shard, and Shutdown, which waits for it.
	ReplyWriteTimeout time.Duration
	// Suspect tunes how the leader suspects a dead worker (suspect.go);
	// the zero value is DefaultSuspectPolicy.
	Suspect SuspectPolicy
}

// DefaultBatchLinger is Config.BatchLinger's default. Against no linger,
// both orders of one A/B run (dssp bench mesh, 4 nodes, ASP, load 5–6):
// 4 pushes an entry instead of 1.9–2, fsyncs per worker-iteration 5.1–5.5
// instead of 8.8–9.2, 3-replica pushes 0.67–0.69 of the echo instead of
// 0.46–0.47, mesh samples/s ×1.55 and ×1.14; dssp up (defaults) to 97 %
// 57.2/52.2 s against 57.2/72.2 s, and with --paradigm asp --slowdown
// 1,1,2,4 --compute-delay 40ms, where the workers do not push together,
// 97.2/92.2 s against 102.2/92.2 s. 5 ms, in an earlier one-order run,
// wrote 7.35 fsyncs per worker-iteration (0 ms: 8.8–9.0) and reached 0.56
// of the echo.
const DefaultBatchLinger = 15 * time.Millisecond

// maxBatchLinger keeps a mistyped linger from stalling every push.
const maxBatchLinger = time.Second

// DefaultConfig returns the node's settings for shard on node id.
func DefaultConfig(shard uint32, id mesh.NodeID) Config {
	return Config{
		Shard: shard, ID: id,
		HeartbeatTimeout:   500 * time.Millisecond,
		ElectionTimeout:    500 * time.Millisecond,
		LeaderLeaseTimeout: 250 * time.Millisecond,
		CommitTimeout:      100 * time.Millisecond,
		SnapshotInterval:   250 * time.Millisecond,
		SnapshotThreshold:  256,
		TrailingLogs:       64,
		LogBytes:           4 << 20,
		TrailingBytes:      2 << 20,
		MaxAppendEntries:   16,
		MaxBatchPushes:     64,
		MaxBatchBytes:      32 << 20,
		MaxInflightBatches: 1,
		BatchLinger:        DefaultBatchLinger,
		SumBatches:         true,
		ApplyTimeout:       5 * time.Second,
		HeldKeepAlive:      time.Second,
		IdleStreamTimeout:  2 * time.Minute,
		ReplyWriteTimeout:  10 * time.Second,
	}
}

// Raft timing sized to the group count. hashicorp/raft runs, per group and
// follower, a heartbeat loop at a random period in [HeartbeatTimeout/10,
// HeartbeatTimeout/5] (about 13 a second at 500 ms) and, even when idle, an
// AppendEntries every CommitTimeout to 2×CommitTimeout so the follower
// learns the commit index (about 33 a second at 20 ms). A node hosting G
// groups pays both in proportion to G, whatever the traffic: dssp bench
// scale measured 26 answered heartbeats/s and 8.5% of a core per idle node
// at 4 nodes × 4 shards (R 3, 3 groups a node), 413/s and 30% at 4 × 64
// (48 groups a node); stretching the heartbeat alone cut heartbeats 3× and
// left the CPU at 29%: the commit-index RPCs are the larger half.
// CommitTimeout's base is 100 ms (hashicorp/raft's own default is 50 ms):
// at 20 ms every idle leader–follower pair exchanged about 33 RPCs a
// second; at 100 ms about 7. An idle follower learns the last commit up to
// 200 ms late; entries in flight carry the commit index as before, and a
// new leader, a leadership transfer and a caught-up check do not wait on
// it. dssp bench scale, N 16 × S 64 idle, same run: 11.7% → 9.8% of a core
// a node.
// [Config.ForGroups] stretches both, with the election and lease timeouts,
// in proportion to G beyond GroupsAtDefaultTiming, up to MaxTimerStretch.
// The price on such a dense node: a dead leader is noticed by its followers
// after HeartbeatTimeout × the stretch (1.5 s instead of 0.5 s at 48
// groups), and an idle follower learns the last commit up to 2 ×
// CommitTimeout × the stretch late. A mesh with at most
// GroupsAtDefaultTiming groups a node — the fault suite's meshes, and a
// large mesh with S·R/N small — keeps the defaults unchanged. The stretch
// is fixed when a replica opens (node sizes it by the groups placement
// gives the node then): the bootstrap node of a fresh mesh opens every
// shard alone, so its replicas keep the stretch of S groups until they
// restart (raft.ReloadConfig could shrink heartbeat and election timeouts
// later, but not CommitTimeout or the lease; not done).
const (
	GroupsAtDefaultTiming = 16
	MaxTimerStretch       = 4
)

// ForGroups returns c with HeartbeatTimeout, ElectionTimeout,
// LeaderLeaseTimeout and CommitTimeout multiplied by groups/GroupsAtDefaultTiming, clamped to
// [1, MaxTimerStretch]; groups is the number of Raft groups this node hosts.
func (c Config) ForGroups(groups int) Config {
	f := min(max(float64(groups)/GroupsAtDefaultTiming, 1), MaxTimerStretch)
	stretch := func(d time.Duration) time.Duration { return time.Duration(float64(d) * f) }
	c.HeartbeatTimeout = stretch(c.HeartbeatTimeout)
	c.ElectionTimeout = stretch(c.ElectionTimeout)
	c.LeaderLeaseTimeout = stretch(c.LeaderLeaseTimeout)
	c.CommitTimeout = stretch(c.CommitTimeout)
	return c
}

// Raft timing sized to the entry. A push entry of a large model's shard
// (6.25 MB for a 100 MB model in 8 shards, bf16), its 25 MB snapshot
// installed on a new replica, and the pushes and replies of the same size
// share each node pair's QUIC connection and the machine's cores with the
// heartbeats: on a loaded machine a heartbeat then waits behind them for
// longer than the 250 ms lease, and the leader steps down (bench bigmodel
// saw every shard's leader do so while the mesh formed, and elections
// churn from there). [Config.ForEntryBytes] stretches HeartbeatTimeout,
// ElectionTimeout and LeaderLeaseTimeout in proportion to the entry's
// bytes beyond EntryBytesAtDefaultTiming, up to MaxEntryStretch, and
// sends fewer entries per AppendEntries (MaxAppendEntries ÷ the stretch,
// at least 1), so that one RPC carries about as many bytes as at the
// default. The price: a dead leader of such a shard is noticed that much
// later (3 s instead of 0.5 s at 6 MB).
const (
	EntryBytesAtDefaultTiming = 1 << 20
	MaxEntryStretch           = 8
)

// EntryStretch is the factor ForEntryBytes stretches by for entries of
// entryBytes: entryBytes/EntryBytesAtDefaultTiming clamped to [1,
// MaxEntryStretch].
func EntryStretch(entryBytes int64) float64 {
	return min(max(float64(entryBytes)/EntryBytesAtDefaultTiming, 1), MaxEntryStretch)
}

// ForEntryBytes returns c with its raft timing and MaxAppendEntries sized
// to push entries of entryBytes (a shard's slice in the wire precision;
// 0 leaves c as it is).
func (c Config) ForEntryBytes(entryBytes int64) Config {
	f := EntryStretch(entryBytes)
	if f <= 1 {
		return c
	}
	stretch := func(d time.Duration) time.Duration { return time.Duration(float64(d) * f) }
	c.HeartbeatTimeout = stretch(c.HeartbeatTimeout)
	c.ElectionTimeout = stretch(c.ElectionTimeout)
	c.LeaderLeaseTimeout = stretch(c.LeaderLeaseTimeout)
	c.MaxAppendEntries = max(1, int(float64(c.MaxAppendEntries)/f))
	return c
}

// Raft timing sized to the round trip. A leader steps down when a quorum
// has not answered within LeaderLeaseTimeout, and a follower hears from it
// once a round trip and a heartbeat period (up to HeartbeatTimeout/5)
// apart: at 250 ms a leader whose quorum lies across a 300 ms round trip
// (the link lab's two sites at 150 ms one way) stepped down after every
// election it won, and the shard never kept a leader. [Config.ForRTT]
// raises the lease to RTTLeaseFactor × the group's longest round trip,
// and the heartbeat and election timeouts to twice the lease (the
// defaults' ratio), so that a heartbeat period, the round trip and a
// queue fit in the lease; a round trip up to the default lease ÷
// RTTLeaseFactor (62.5 ms: a 25 ms one-way link) changes nothing.
const RTTLeaseFactor = 4

// ForRTT returns c with its raft timing sized to rtt, the longest
// measured round trip between this replica and the others of its group
// (0 leaves c as it is).
func (c Config) ForRTT(rtt time.Duration) Config {
	lease := RTTLeaseFactor * rtt
	if lease <= c.LeaderLeaseTimeout {
		return c
	}
	c.LeaderLeaseTimeout = lease
	c.HeartbeatTimeout = max(c.HeartbeatTimeout, 2*lease)
	c.ElectionTimeout = max(c.ElectionTimeout, 2*lease)
	return c
}

// Validate names the first bad value.
func (c Config) Validate() error {
	if err := c.ID.Validate(); err != nil {
		return fmt.Errorf("shard: Config.ID: %w", err)
	}
	pos := []struct {
		name string
		d    time.Duration
	}{
		{"HeartbeatTimeout", c.HeartbeatTimeout}, {"ElectionTimeout", c.ElectionTimeout},
		{"LeaderLeaseTimeout", c.LeaderLeaseTimeout}, {"CommitTimeout", c.CommitTimeout},
		{"SnapshotInterval", c.SnapshotInterval}, {"ApplyTimeout", c.ApplyTimeout}, {"HeldKeepAlive", c.HeldKeepAlive},
		{"ReplyWriteTimeout", c.ReplyWriteTimeout},
	}
	for _, p := range pos {
		if p.d <= 0 {
			return fmt.Errorf("shard: Config.%s (%s) must be positive", p.name, p.d)
		}
	}
	switch {
	case c.LeaderLeaseTimeout > c.HeartbeatTimeout:
		return fmt.Errorf("shard: Config.LeaderLeaseTimeout (%s) cannot exceed HeartbeatTimeout (%s)", c.LeaderLeaseTimeout, c.HeartbeatTimeout)
	case c.ElectionTimeout < c.HeartbeatTimeout:
		return fmt.Errorf("shard: Config.ElectionTimeout (%s) cannot be below HeartbeatTimeout (%s)", c.ElectionTimeout, c.HeartbeatTimeout)
	case c.SnapshotThreshold < 1:
		return fmt.Errorf("shard: Config.SnapshotThreshold (%d) must be at least 1", c.SnapshotThreshold)
	case c.LogBytes < 0 || c.TrailingBytes < 0:
		return fmt.Errorf("shard: Config.LogBytes (%d) and TrailingBytes (%d) must not be negative", c.LogBytes, c.TrailingBytes)
	case c.MaxAppendEntries < 1 || c.MaxAppendEntries > 1024:
		return fmt.Errorf("shard: Config.MaxAppendEntries (%d) must be in [1, 1024]", c.MaxAppendEntries)
	case c.MaxBatchPushes < 1:
		return fmt.Errorf("shard: Config.MaxBatchPushes (%d) must be at least 1", c.MaxBatchPushes)
	case c.MaxBatchBytes < 1:
		return fmt.Errorf("shard: Config.MaxBatchBytes (%d) must be at least 1", c.MaxBatchBytes)
	case c.IdleStreamTimeout <= c.HeldKeepAlive:
		return fmt.Errorf("shard: Config.IdleStreamTimeout (%s) must exceed HeldKeepAlive (%s)", c.IdleStreamTimeout, c.HeldKeepAlive)
	case c.MaxInflightBatches < 1:
		return fmt.Errorf("shard: Config.MaxInflightBatches (%d) must be at least 1", c.MaxInflightBatches)
	case c.BatchLinger < 0 || c.BatchLinger > maxBatchLinger:
		return fmt.Errorf("shard: Config.BatchLinger (%s) must be in [0, %s]", c.BatchLinger, maxBatchLinger)
	}
	return nil
}
