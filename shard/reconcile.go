package shard

import (
	"context"
	"dsspmesh/shardapi"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"dsspmesh/mesh"
)

// Reconcile takes one step that moves the shard's raft configuration toward
// desired (the placement's replica set): first it adds a missing replica —
// as a non-voter, waits until that replica has applied everything the
// leader had applied when it began, then promotes it to voter — and only
// when none is missing it removes one replica that should go. It returns
// done when the voters equal desired. Leader only (*NotLeaderError
// otherwise); one call at a time (ErrReconfigActive), and raft itself
// allows one change in flight. Call it again after each step, and
// whenever membership changes.
// A leader not in desired first hands its leadership to a voter that is
// (handOver; docs/design.md, "Reconcile from inside the set"). A replica
// the agreement check named diverged is not added (nor waited for) until
// the leader has evicted it: it applies nothing, so it would never catch
// up, and the wait would hold the configuration slot the eviction needs;
// done is then false.
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
	named := r.fsm.check().named
	skipped := false
	for _, id := range desired {
		if voters[id] {
			continue
		}
		if _, ok := named[id]; ok {
			skipped = true
			continue
		}
		r.log.Info("adding replica", "peer", id)
		if !members[id] {
			if err := r.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(id), 0, r.cfg.ApplyTimeout).Error(); err != nil {
				return false, fmt.Errorf("shard %d: add non-voter %s: %w", r.cfg.Shard, id, err)
			}
		}
		if err := r.waitCaughtUp(ctx, id, r.fsm.AppliedIndex()); err != nil {
			return false, err
		}
		if err := r.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(id), 0, r.cfg.ApplyTimeout).Error(); err != nil {
			return false, fmt.Errorf("shard %d: promote %s: %w", r.cfg.Shard, id, err)
		}
		members[id], voters[id] = true, true
		return sameSet(members, desired) && allVoters(voters, desired), nil
	}
	var extra []mesh.NodeID
	for id := range members {
		if !slices.Contains(desired, id) {
			extra = append(extra, id)
		}
	}
	if len(extra) == 0 {
		return !skipped, nil
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
	return len(extra) == 1 && allVoters(voters, desired) && !skipped, nil
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

// waitCaughtUp polls id's applied index over the RPC channel until it
// reaches index; it gives up once the agreement check names id diverged.
func (r *Replica) waitCaughtUp(ctx context.Context, id mesh.NodeID, index uint64) error {
	var last error
	for {
		if at, ok := r.fsm.check().named[id]; ok {
			return fmt.Errorf("shard %d: %s was named diverged by the check of index %d: it is evicted and rebuilt before it is added", r.cfg.Shard, id, at)
		}
		got, err := r.probe(ctx, id)
		if err == nil && got >= index {
			return nil
		}
		if err != nil {
			last = err
		} else {
			last = fmt.Errorf("applied index %d of %d", got, index)
		}
		t := time.NewTimer(r.cfg.HeartbeatTimeout)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("shard %d: %s did not catch up: %w (last: %v)", r.cfg.Shard, id, ctx.Err(), last)
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
