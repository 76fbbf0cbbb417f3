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

	// Log bounds: raft's entry counts, kept by the log budget
	// (logbudget.go) at LogBytes and TrailingBytes over the mean entry and
	// never above SnapshotThreshold and TrailingLogs; snapshots are checked
	// every SnapshotInterval.
	SnapshotInterval  time.Duration
	SnapshotThreshold uint64
	TrailingLogs      uint64
	LogBytes          int64
	TrailingBytes     int64
	// MaxAppendEntries bounds the entries in one AppendEntries RPC.
	MaxAppendEntries int

	// Batching: pushes queued at the leader go into one entry, up to
	// MaxBatchPushes pushes or MaxBatchBytes of gradients, while at most
	// MaxInflightBatches entries are proposed and not applied (1: pushes
	// that arrive while an entry replicates share the next).
	MaxBatchPushes     int
	MaxBatchBytes      int
	MaxInflightBatches int
	// BatchLinger is how long the proposer, holding fewer pushes than the
	// shard has workers and finding the queue empty, waits for more (0: it
	// proposes at once; docs/design.md, "Batching").
	BatchLinger time.Duration
	// SumBatches makes the leader send the pushes of a batch that the gate
	// will take as one summed gradient (proposer.go, group).
	SumBatches bool

	// ApplyTimeout bounds the wait to enqueue a proposal.
	ApplyTimeout time.Duration
	// HeldKeepAlive is the period of Held frames while a push is held, and
	// of the check that this replica still leads.
	HeldKeepAlive time.Duration
	// IdleStreamTimeout closes a worker's stream silent this long while
	// none of its pushes is held (it must exceed HeldKeepAlive);
	// ReplyWriteTimeout bounds how long a reply frame may wait for its
	// worker to read it, plus the frame's time at shardapi.MinReplyRate
	// (docs/design.md, "Streams that stall").
	IdleStreamTimeout time.Duration
	ReplyWriteTimeout time.Duration
	// Suspect tunes how the leader suspects a dead worker (suspect.go);
	// the zero value is DefaultSuspectPolicy.
	Suspect SuspectPolicy

	// The agreement check (docs/design.md, "Replicas agree"): every
	// replica digests its state each time its applied index crosses a
	// multiple of CheckEvery (0: no check; every replica of a shard must
	// use the same), and the leader waits at most CheckWait for the other
	// replicas' digests of an index before it proposes the check.
	CheckEvery uint64
	CheckWait  time.Duration
}

// DefaultCheckEvery is Config.CheckEvery's default: a check per 256
// entries, as often as a snapshot (docs/design.md, "Replicas agree", has
// its cost).
const DefaultCheckEvery = 256

// DefaultBatchLinger is Config.BatchLinger's default (docs/design.md,
// "Raft timing" has what it bought).
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
		CheckEvery:         DefaultCheckEvery,
		CheckWait:          2 * time.Second,
	}
}

// Raft timing sized to the group count (docs/design.md, "Raft timing"):
// ForGroups stretches the timers in proportion to the groups a node hosts
// beyond GroupsAtDefaultTiming, up to MaxTimerStretch.
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

// Raft timing sized to the entry (docs/design.md, "Raft timing"):
// ForEntryBytes stretches the timers and sends fewer entries per
// AppendEntries in proportion to the entry's bytes beyond
// EntryBytesAtDefaultTiming, up to MaxEntryStretch.
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
		{"ReplyWriteTimeout", c.ReplyWriteTimeout}, {"CheckWait", c.CheckWait},
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

// SuspectPolicy tunes suspicion; the zero value is DefaultSuspectPolicy.
type SuspectPolicy struct {
	Off   bool          // never suspect (gossip alone removes dead workers)
	After int64         // predicted push intervals without a push; default 4
	Floor time.Duration // the least silence suspected; default 1s
	Check time.Duration // period of the leader's check; default 250ms
	// Silence counts a worker whose stream is still open as disconnected
	// when nothing has arrived from its node for this long (a transport
	// that is a mesh.SilenceReporter: QUIC answers keep-alives every
	// 750 ms); default 1.5s.
	Silence time.Duration
}

// DefaultSuspectPolicy is 4 predicted intervals, at least 1 s, checked
// every 250 ms.
func DefaultSuspectPolicy() SuspectPolicy {
	return SuspectPolicy{After: 4, Floor: time.Second, Check: 250 * time.Millisecond, Silence: 1500 * time.Millisecond}
}

func (p SuspectPolicy) orDefault() SuspectPolicy {
	d := DefaultSuspectPolicy()
	p.After, p.Floor = positiveOr(p.After, d.After), positiveOr(p.Floor, d.Floor)
	p.Check, p.Silence = positiveOr(p.Check, d.Check), positiveOr(p.Silence, d.Silence)
	return p
}

// positiveOr is v, or d when v is not positive.
func positiveOr[T int64 | time.Duration](v, d T) T {
	if v <= 0 {
		return d
	}
	return v
}
