package shards

import (
	"testing"
	"time"

	"dsspmesh/mesh"
	"dsspmesh/node/records"
	"dsspmesh/shardapi"
)

// termReplica is a replica at a term with a configuration.
type termReplica struct {
	Replica
	term   uint64
	config shardapi.Configuration
}

func (r *termReplica) Status() shardapi.ReplicaStatus { return shardapi.ReplicaStatus{Term: r.term} }
func (r *termReplica) Configuration() (shardapi.Configuration, error) {
	return r.config, nil
}

// A replica that still counts itself a voter is removed by the leader's
// word only when a peer leads the shard at its term or later with voters
// that leave this node out (the bootstrap node that handed its shard to
// the placed replicas, then never heard of its removal, pre-voted for
// ever and kept the replica open; TestHealthyMeshLogsNoUnexpectedError
// counted its warnings).
func TestReplicaRemovedByTheLeadersWord(t *testing.T) {
	self := mesh.NodeID("n0")
	voter := shardapi.Configuration{Voters: []mesh.NodeID{"n0", "n1", "n2"}}
	nonvoter := shardapi.Configuration{Voters: []mesh.NodeID{"n1", "n2"}, Nonvoters: []mesh.NodeID{"n0"}}
	// The word is heard age seconds before now; the manager first saw the
	// replica a voter at t0, 10 s before now.
	t0 := time.Unix(1000, 0)
	now := t0.Add(10 * time.Second)
	leaderHeard := func(term uint64, age float64, voters ...string) func(uint32) (records.ShardStatus, bool) {
		return func(uint32) (records.ShardStatus, bool) {
			return records.ShardStatus{ID: 3, Leader: "n1", Term: term, Local: "leader", Voters: voters, AgeSeconds: age}, true
		}
	}
	leader := func(term uint64, voters ...string) func(uint32) (records.ShardStatus, bool) {
		return leaderHeard(term, 1, voters...)
	}
	none := func(uint32) (records.ShardStatus, bool) { return records.ShardStatus{}, false }
	for _, tc := range []struct {
		name   string
		peer   func(uint32) (records.ShardStatus, bool)
		term   uint64
		config shardapi.Configuration
		want   bool
	}{
		{"removed at a later term", leader(4, "n1", "n2", "n3"), 3, voter, true},
		{"removed at its own term", leader(3, "n1", "n2", "n3"), 3, voter, true},
		{"an older leader's word", leader(2, "n1", "n2", "n3"), 3, voter, false},
		{"still among the voters", leader(4, "n0", "n1", "n2"), 3, voter, false},
		{"a non-voter being caught up", leader(4, "n1", "n2", "n3"), 3, nonvoter, false},
		{"the word heard before this replica was seen a voter", leaderHeard(3, 12, "n1", "n2", "n3"), 3, voter, false},
		{"heard within the margin of it", leaderHeard(3, 9.5, "n1", "n2", "n3"), 3, voter, false},
		{"no peer leads it", none, 3, voter, false},
		{"no mesh view", nil, 3, voter, false},
	} {
		m := &Manager{d: Deps{ID: self, PeerLeader: tc.peer}, voters: map[uint32]voterMark{}}
		rep := &termReplica{term: tc.term, config: tc.config}
		if tc.config.Has(self) && len(tc.config.Nonvoters) == 0 {
			m.voterSince(3, rep, t0)
		}
		if got := m.removed(3, rep, now); got != tc.want {
			t.Errorf("%s: removed %v, want %v", tc.name, got, tc.want)
		}
	}
	// A replica first seen a voter now waits for a word heard after.
	m := &Manager{d: Deps{ID: self, PeerLeader: leader(4, "n1", "n2", "n3")}, voters: map[uint32]voterMark{}}
	rep := &termReplica{term: 3, config: voter}
	if m.removed(3, rep, now) {
		t.Error("a replica first seen a voter now was removed by a word heard a second ago")
	}
	if !m.removed(3, rep, now.Add(5*time.Second)) {
		t.Error("a word heard 3 s after the replica was seen a voter did not count")
	}
}
