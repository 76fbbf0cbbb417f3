package shards

import (
	"testing"

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
	leader := func(term uint64, voters ...string) func(uint32) (records.ShardStatus, bool) {
		return func(uint32) (records.ShardStatus, bool) {
			return records.ShardStatus{ID: 3, Leader: "n1", Term: term, Local: "leader", Voters: voters}, true
		}
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
		{"no peer leads it", none, 3, voter, false},
		{"no mesh view", nil, 3, voter, false},
	} {
		m := &Manager{d: Deps{ID: self, PeerLeader: tc.peer}}
		if got := m.removed(3, &termReplica{term: tc.term, config: tc.config}); got != tc.want {
			t.Errorf("%s: removed %v, want %v", tc.name, got, tc.want)
		}
	}
}
