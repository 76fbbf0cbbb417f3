package shard

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"dsspmesh/mesh"
	"dsspmesh/shardapi"
)

// Reconcile takes one step that moves the shard's raft configuration toward
// desired (the placement's replica set): first it adds every missing
// replica as a non-voter, waits until one of them has applied everything
// the leader had applied when it began, and promotes that one to voter (a
// placed member that never catches up — one that hosts nothing — holds
// back no other); only when none is missing it removes one replica that
// should go. It returns
// done when the voters equal desired. Leader only (*NotLeaderError
// otherwise); one call at a time (ErrReconfigActive), and raft itself
// allows one change in flight. Call it again after each step, and
// whenever membership changes.
// A leader not in desired first hands its leadership to a voter that is
// (handOver; docs/design.md, "Reconcile from inside the set"). While the
// agreement check has named a replica diverged and the leader has not yet
// evicted it, no step is taken (done is false) and a wait for another
// replica's catch-up ends: the eviction needs the configuration slot, and
// a wait holds it for up to ctx's time — for ever, a step after a step,
// when the replica awaited never catches up (a member that hosts nothing).
func (r *Replica) Reconcile(ctx context.Context, desired []mesh.NodeID) (done bool, err error) {
	if !r.IsLeader() {
		return false, r.notLeader()
	}
	if !r.reconfig.TryLock() {
		return false, shardapi.ErrReconfigActive
	}
	defer r.reconfig.Unlock()
	f := r.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return false, fmt.Errorf("shard %d: read configuration: %w", r.cfg.Shard, err)
	}
	voters := map[mesh.NodeID]bool{}
	members := map[mesh.NodeID]bool{}
	for _, s := range f.Configuration().Servers {
		members[mesh.NodeID(s.ID)] = true
		voters[mesh.NodeID(s.ID)] = s.Suffrage == raft.Voter
	}
	if !slices.Contains(desired, r.cfg.ID) {
		if r.handOver(desired, voters) {
			return false, nil
		}
	}
	if evicting(r.fsm.check().named, r.cfg.ID) {
		return false, nil
	}
	var missing []mesh.NodeID
	for _, id := range desired {
		if voters[id] {
			continue
		}
		missing = append(missing, id)
		r.log.Info("adding replica", "peer", id)
		if !members[id] {
			if err := r.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(id), 0, r.cfg.ApplyTimeout).Error(); err != nil {
				return false, fmt.Errorf("shard %d: add non-voter %s: %w", r.cfg.Shard, id, err)
			}
			members[id] = true
		}
	}
	if len(missing) > 0 {
		id, err := r.waitCaughtUp(ctx, missing, r.fsm.AppliedIndex())
		if err != nil {
			return false, err
		}
		if err := r.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(id), 0, r.cfg.ApplyTimeout).Error(); err != nil {
			return false, fmt.Errorf("shard %d: promote %s: %w", r.cfg.Shard, id, err)
		}
		voters[id] = true
		return sameSet(members, desired) && allVoters(voters, desired), nil
	}
	var extra []mesh.NodeID
	for id := range members {
		if !slices.Contains(desired, id) {
			extra = append(extra, id)
		}
	}
	if len(extra) == 0 {
		return true, nil
	}
	slices.Sort(extra)
	victim := extra[0]
	if victim == r.cfg.ID && len(extra) > 1 {
		victim = extra[1]
	}
	r.log.Info("removing replica", "peer", victim)
	if err := r.raft.RemoveServer(raft.ServerID(victim), 0, r.cfg.ApplyTimeout).Error(); err != nil {
		return false, fmt.Errorf("shard %d: remove %s: %w", r.cfg.Shard, victim, err)
	}
	return len(extra) == 1 && allVoters(voters, desired), nil
}

// evicting reports whether an eviction is pending: a server other than
// self named diverged by the agreement check and not yet evicted (self,
// named, stops on its own check).
func evicting(named map[mesh.NodeID]uint64, self mesh.NodeID) bool {
	for id := range named {
		if id != self {
			return true
		}
	}
	return false
}

// handOver transfers this leader's leadership to a voter in desired, the
// first that takes it, trying them in desired's order; it reports whether
// one did. A voter that cannot take it (unreachable, or not caught up
// within raft's transfer timeout) is skipped; when none can, the caller
// reconfigures from here as before rather than not at all.
func (r *Replica) handOver(desired []mesh.NodeID, voters map[mesh.NodeID]bool) bool {
	for _, id := range desired {
		if id == r.cfg.ID || !voters[id] {
			continue
		}
		r.log.Info("this leader is not among the replicas desired; handing leadership to one that is before reconfiguring", "to", id)
		err := r.raft.LeadershipTransferToServer(raft.ServerID(id), raft.ServerAddress(id)).Error()
		if err == nil {
			return true
		}
		r.log.Warn("leadership hand-over before reconfiguring failed", "to", id, "err", err)
		if !r.IsLeader() {
			return true // leadership moved all the same; the new leader goes on
		}
	}
	return false
}

func sameSet(members map[mesh.NodeID]bool, desired []mesh.NodeID) bool {
	return len(members) == len(desired) && !slices.ContainsFunc(desired, func(d mesh.NodeID) bool { return !members[d] })
}

func allVoters(voters map[mesh.NodeID]bool, desired []mesh.NodeID) bool {
	return !slices.ContainsFunc(desired, func(d mesh.NodeID) bool { return !voters[d] })
}

// waitCaughtUp polls the applied index of each of ids over the RPC
// channel, every heartbeat timeout, until one reaches index, and returns
// that one; it gives up once the agreement check names a replica diverged
// (evicting), one of ids or another: the eviction comes first.
func (r *Replica) waitCaughtUp(ctx context.Context, ids []mesh.NodeID, index uint64) (mesh.NodeID, error) {
	last := map[mesh.NodeID]error{}
	for {
		if named := r.fsm.check().named; evicting(named, r.cfg.ID) {
			return "", fmt.Errorf("shard %d: the wait for %v to catch up gives way to the eviction of %s, named diverged by the agreement check", r.cfg.Shard, ids, slices.Sorted(maps.Keys(named)))
		}
		for _, id := range ids {
			pctx, cancel := context.WithTimeout(ctx, r.cfg.HeartbeatTimeout)
			got, err := r.probe(pctx, id)
			cancel()
			if err == nil && got >= index {
				return id, nil
			}
			if err == nil {
				err = fmt.Errorf("applied index %d of %d", got, index)
			}
			last[id] = err
		}
		t := time.NewTimer(r.cfg.HeartbeatTimeout)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			var why []string
			for _, id := range ids {
				why = append(why, fmt.Sprintf("%s: %v", id, last[id]))
			}
			return "", fmt.Errorf("shard %d: none of %v caught up: %w (last: %s)", r.cfg.Shard, ids, ctx.Err(), strings.Join(why, "; "))
		}
	}
}

func (r *Replica) probe(ctx context.Context, id mesh.NodeID) (uint64, error) {
	rep, _, err := r.call(ctx, id, shardapi.Request{Op: shardapi.OpStatus, PushMeta: shardapi.PushMeta{PushID: shardapi.PushID{Worker: "reconcile"}}})
	return rep.Index, err
}

// Configuration returns the shard's raft configuration as this replica
// knows it. It waits for raft's main loop, so it fails once the replica is
// shut down.
func (r *Replica) Configuration() (shardapi.Configuration, error) {
	f := r.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return shardapi.Configuration{}, fmt.Errorf("shard %d: read configuration: %w", r.cfg.Shard, err)
	}
	var c shardapi.Configuration
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			c.Voters = append(c.Voters, mesh.NodeID(s.ID))
		} else {
			c.Nonvoters = append(c.Nonvoters, mesh.NodeID(s.ID))
		}
	}
	return c, nil
}

// TransferLeadership hands leadership to voter to, or, with to empty, to
// the most up-to-date other voter, and waits for the outcome (leader
// only). A graceful leave calls it so the shard does not wait out an
// election timeout; a node leading more than its share names the voter.
func (r *Replica) TransferLeadership(to mesh.NodeID) error {
	f := r.raft.LeadershipTransfer
	if to != "" {
		f = func() raft.Future {
			return r.raft.LeadershipTransferToServer(raft.ServerID(to), raft.ServerAddress(to))
		}
	}
	if err := f().Error(); err != nil {
		return fmt.Errorf("shard %d: leadership transfer to %q: %w", r.cfg.Shard, to, err)
	}
	return nil
}
