package shard

import (
	"dsspmesh/shardapi"
	"fmt"
	"sync"

	"github.com/hashicorp/raft"

	"dsspmesh/mesh"
)

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

// LeaderChanged returns a channel that is closed at the next change of
// this replica's raft state or of the leader it knows. Read the state
// after taking the channel, so a change between the two is not missed:
//
//	for ch := rep.LeaderChanged(); !rep.IsLeader(); ch = rep.LeaderChanged() {
//		<-ch
//	}
func (r *Replica) LeaderChanged() <-chan struct{} {
	r.lead.mu.Lock()
	defer r.lead.mu.Unlock()
	return r.lead.changed
}

// leadership fans raft's state and leader observations out to
// LeaderChanged waiters and Deps.OnLeader.
type leadership struct {
	mu       sync.Mutex
	changed  chan struct{} // closed and replaced at every observation; guarded by mu
	reported uint64        // highest term given to OnLeader; watcher goroutine only
}

// watchLeadership runs until the replica shuts down. It is started before
// raft can have elected anyone it has not seen: the observer is registered
// first and the state read after, so a replica that led at once (the only
// voter, restarted) is reported too.
func (r *Replica) watchLeadership() {
	ch := make(chan raft.Observation, 16)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.RaftState, raft.LeaderObservation:
			return true
		}
		return false
	})
	r.raft.RegisterObserver(obs)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer r.raft.DeregisterObserver(obs)
		r.leaderSeen()
		for {
			select {
			case <-ch:
			case <-r.ctx.Done():
				return
			}
			r.leaderSeen()
		}
	}()
}

// leaderSeen reports the term to Deps.OnLeader once if this replica leads,
// then wakes LeaderChanged waiters (so a waiter that sees it lead knows
// the report is made). The term is read after the state and kept only if
// leadership held across the read, so a report never names a term this
// replica did not lead.
func (r *Replica) leaderSeen() {
	if r.deps.OnLeader != nil {
		t := r.raft.CurrentTerm()
		if r.raft.State() == raft.Leader && r.raft.CurrentTerm() == t && t > r.lead.reported {
			r.lead.reported = t
			r.deps.OnLeader(t)
		}
	}
	r.lead.mu.Lock()
	close(r.lead.changed)
	r.lead.changed = make(chan struct{})
	r.lead.mu.Unlock()
}
