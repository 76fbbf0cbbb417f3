package shards

import (
	"fmt"
	"sync"
	"time"

	"dsspmesh/shardapi"
)

// The heal timeline (docs/design.md, "Failure handling"): a replica that
// opens here with no state of its own (a node rejoining with an empty data
// dir, a shard placement moves here, a diverged replica rebuilt) is
// followed until it holds the shard's state, and each step is an event of
// kind heal in /status, logged at INFO, so an operator sees where the time
// went: opened (the placement that put it here), state received (the
// snapshot's bytes, the time since it opened and the rate), caught up (the
// leader promoted it to voter, which it does once the replica has applied
// all the leader had when it added it, and it has applied the commit index
// it knows). The node adds the last step, its first round acknowledged
// (worker.Worker.firstRound). Followed by the manager's sync, every 300 ms:
// each step's time is within one tick.

// heals is the timelines under way, by shard. Safe for concurrent use;
// it calls no replica, and event must not call the manager: the manager
// calls note holding its lock.
type heals struct {
	event func(shard uint32, detail string)
	mu    sync.Mutex
	on    map[uint32]*healTrack
}

// healTrack is one replica's timeline so far. An empty replica has
// restored nothing when it opens: its first restore
// (ReplicaStatus.Restored) is the leader's snapshot.
type healTrack struct {
	opened   time.Time
	received bool
}

// healView is what follow needs of a followed replica: its status and
// whether it votes in its shard (false, false: it is gone).
type healView func(shard uint32) (rs shardapi.ReplicaStatus, votes, ok bool)

func newHeals(event func(shard uint32, detail string)) *heals {
	return &heals{event: event, on: map[uint32]*healTrack{}}
}

// note starts shard's timeline at now: its replica just opened with no
// state on disk.
func (h *heals) note(shard uint32, now time.Time) {
	h.mu.Lock()
	h.on[shard] = &healTrack{opened: now}
	h.mu.Unlock()
	h.event(shard, "replica opened empty (placed here): waiting for the leader's snapshot")
}

// follow takes each timeline a step on, at now. One caller at a time.
func (h *heals) follow(now time.Time, view healView) {
	h.mu.Lock()
	on := make(map[uint32]*healTrack, len(h.on))
	for id, tr := range h.on {
		on[id] = tr
	}
	h.mu.Unlock()
	for id, tr := range on {
		rs, votes, ok := view(id)
		done := !ok
		took := now.Sub(tr.opened).Round(time.Millisecond)
		if ok && !tr.received && rs.Restored.Count > 0 {
			tr.received = true
			at := now
			if !rs.Restored.At.IsZero() && rs.Restored.At.Before(now) {
				at = rs.Restored.At // the restore's own time, not this tick's
			}
			in := at.Sub(tr.opened).Round(time.Millisecond)
			h.event(id, fmt.Sprintf("state received: a snapshot of %s, restored %s after the replica opened (%s/s)",
				bytesText(rs.Restored.Bytes), in, bytesText(int64(float64(rs.Restored.Bytes)/max(in.Seconds(), 1e-3)))))
		}
		if ok && votes && rs.CommitIndex > 0 && rs.AppliedIndex >= rs.CommitIndex {
			how := "from the leader's log alone (no snapshot)"
			if tr.received {
				how = "after the snapshot"
			}
			h.event(id, fmt.Sprintf("caught up: a voter at index %d, applied %s, %s after the replica opened; its slice %s of parameters",
				rs.AppliedIndex, how, took, bytesText(int64(rs.Spec.Len)*4)))
			done = true
		}
		if done {
			h.mu.Lock()
			if h.on[id] == tr {
				delete(h.on, id)
			}
			h.mu.Unlock()
		}
	}
}

// bytesText is n bytes in the largest unit that reads.
func bytesText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
