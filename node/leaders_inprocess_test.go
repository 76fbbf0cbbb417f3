package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"dsspmesh/internal/wait"
	"dsspmesh/mesh"
)

// TestInProcessLeadersSpreadNearTheirQuorum runs four nodes of 8 shards in
// this process on two emulated sites (nodes 0 and 1 on one, 2 and 3 on the
// other: their transports report 0.2 ms within a site and 50 ms between,
// mesh.InmemNetwork.SetRTT). The bootstrap node leads all 8 at first;
// the leaders must spread, each shard's to a voter on the site holding two
// of its three voters (its commits then never cross), with no node over
// twice its share.
func TestInProcessLeadersSpreadNearTheirQuorum(t *testing.T) {
	const nodes, shards = 4, 8
	rec := newRecorder()
	m := startMesh(t, nodes, shards, rec)
	site := map[mesh.NodeID]int{}
	for i, id := range m.order {
		site[id] = i / 2
	}
	for _, a := range m.order {
		for _, b := range m.order {
			if a != b {
				d := 50 * time.Millisecond
				if site[a] == site[b] {
					d = 200 * time.Microsecond
				}
				m.net.SetRTT(a, b, d)
			}
		}
	}
	var last string
	// The leaders' moves come from each node's 300 ms rounds, which report
	// to no observer: a bounded poll.
	err := wait.Until(context.Background(), 2*time.Minute, "leaders near their quorum, spread", func() bool {
		leads := map[mesh.NodeID]int{}
		for s := range uint32(shards) {
			l := rec.leaderOf(s)
			nd := m.node(l)
			if nd == nil {
				last = fmt.Sprintf("shard %d: no leader", s)
				return false
			}
			rep := nd.replicas.leader(s)
			if rep == nil {
				last = fmt.Sprintf("shard %d: %s no longer leads", s, l)
				return false
			}
			c, err := rep.Configuration()
			if err != nil || len(c.Voters) != 3 || len(c.Nonvoters) > 0 {
				last = fmt.Sprintf("shard %d: configuration %+v %v", s, c, err)
				return false
			}
			same := 0
			for _, v := range c.Voters {
				if site[v] == site[l] {
					same++
				}
			}
			if same < 2 {
				last = fmt.Sprintf("shard %d led from site %d by %s, voters %v", s, site[l], l, c.Voters)
				return false
			}
			leads[l]++
		}
		for _, id := range m.order {
			if leads[id] > 2*shards/nodes || leads[id] == 0 {
				last = fmt.Sprintf("leads per node %v", leads)
				return false
			}
		}
		t.Logf("leads per node %v", leads)
		return true
	})
	if err != nil {
		t.Fatalf("%v: %s", err, last)
	}
	m.stop(t)
}

// node is the running node id, or nil.
func (m *inprocMesh) node(id mesh.NodeID) *inprocNode {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.nodes[id]
}
