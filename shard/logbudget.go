package shard

import (
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// logBudget bounds a replica's raft log by bytes (docs/design.md, "The
// log budget"): it measures the entries this replica stores and keeps
// raft's SnapshotThreshold and TrailingLogs at max(LogBytes, S) and
// max(TrailingBytes, S/2) over the mean entry (budgetCounts), S being the
// state a snapshot writes. observe runs on raft's goroutines that store
// logs; the budget's own lock guards its state.
type logBudget struct {
	cfg Config

	// state, if set, is S: the bytes of the state a snapshot holds now.
	state func() int64

	mu     sync.Mutex
	r      *raft.Raft
	mean   float64
	seen   uint64
	thresh uint64
	trail  uint64
}

func newLogBudget(cfg Config) *logBudget {
	return &logBudget{cfg: cfg, thresh: cfg.SnapshotThreshold, trail: cfg.TrailingLogs}
}

// attach gives the budget the raft whose config it tunes.
func (b *logBudget) attach(r *raft.Raft) {
	b.mu.Lock()
	b.r = r
	b.mu.Unlock()
}

func (b *logBudget) observe(logs []*raft.Log) {
	if b.cfg.LogBytes <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, l := range logs {
		if l.Type != raft.LogCommand {
			continue
		}
		n := float64(len(l.Data) + len(l.Extensions))
		if b.seen == 0 {
			b.mean = n
		} else {
			b.mean += (n - b.mean) / 8
		}
		b.seen++
	}
	if b.seen == 0 || b.r == nil {
		return
	}
	var st int64
	if b.state != nil {
		st = b.state()
	}
	thresh, trail := budgetCounts(b.cfg, b.mean, st)
	if thresh == b.thresh && trail == b.trail {
		return
	}
	rc := b.r.ReloadableConfig()
	rc.SnapshotThreshold, rc.TrailingLogs = thresh, trail
	if err := b.r.ReloadConfig(rc); err == nil {
		b.thresh, b.trail = thresh, trail
	}
}

// budgetCounts is the SnapshotThreshold and TrailingLogs for entries of
// mean bytes and a state of state bytes (the formula above).
func budgetCounts(cfg Config, mean float64, state int64) (threshold, trailing uint64) {
	logBytes, trailBytes := max(cfg.LogBytes, state), max(cfg.TrailingBytes, state/2)
	return clampCount(float64(logBytes)/mean, 2, cfg.SnapshotThreshold), clampCount(float64(trailBytes)/mean, 1, cfg.TrailingLogs)
}

func clampCount(v float64, lo, hi uint64) uint64 {
	if hi < lo {
		hi = lo
	}
	switch {
	case v <= float64(lo):
		return lo
	case v >= float64(hi):
		return hi
	}
	return uint64(v)
}

// measuredLog is the log store raft gets: the replica's, with every stored
// batch shown to the budget after it is stored.
type measuredLog struct {
	raft.LogStore
	budget *logBudget
}

func (m measuredLog) StoreLog(l *raft.Log) error { return m.StoreLogs([]*raft.Log{l}) }

func (m measuredLog) StoreLogs(logs []*raft.Log) error {
	if err := m.LogStore.StoreLogs(logs); err != nil {
		return err
	}
	m.budget.observe(logs)
	return nil
}

// IsMonotonic passes the store's raft.MonotonicLogStore through.
func (m measuredLog) IsMonotonic() bool {
	s, ok := m.LogStore.(raft.MonotonicLogStore)
	return ok && s.IsMonotonic()
}

// countingLog counts the writes to a replica's raft log: each StoreLog or
// StoreLogs call is one transaction, fsynced on raftstore's disk stores,
// however many entries it holds (raft's group commit). It adds no
// locking; the counter is read by Status.
type countingLog struct {
	raft.LogStore
	writes atomic.Uint64
}

func (l *countingLog) StoreLog(e *raft.Log) error {
	l.writes.Add(1)
	return l.LogStore.StoreLog(e)
}

func (l *countingLog) StoreLogs(es []*raft.Log) error {
	l.writes.Add(1)
	return l.LogStore.StoreLogs(es)
}
