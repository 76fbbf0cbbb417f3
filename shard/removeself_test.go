package shard

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"dsspmesh/clock"
	"dsspmesh/mesh"
)

// TestLeaderThatRemovesItselfStaysUp: a leader that commits its own
// removal (Reconcile's last extra replica, placement having left its node
// out) steps down to a follower with its raft running, so that when
// placement names its node again the new leader's Reconcile adds it back
// and it catches up, as its node's shard manager still holds it open.
func TestLeaderThatRemovesItselfStaysUp(t *testing.T) {
	c := newCluster(t, 7)
	ids := c.bootZeros(3, 64, "ssp:3")
	workers := []clock.WorkerID{"a", "b"}
	runWorkers(t, c, ids, workers, 5, 64, nil)
	old := c.waitLeader("")
	self := old.cfg.ID
	if err := old.raft.RemoveServer(raft.ServerID(self), 0, 5*time.Second).Error(); err != nil {
		t.Fatalf("the leader removing itself: %v", err)
	}
	next := c.waitLeader(self)
	if st := old.raft.State(); st == raft.Shutdown {
		t.Fatalf("the removed leader's raft is %v: it could never be added back", st)
	}
	var all []mesh.NodeID
	all = append(all, ids...)
	c.waitFor(20*time.Second, "the removed replica added back as a voter", func() bool {
		done, err := next.Reconcile(context.Background(), all)
		return err == nil && done
	})
	runWorkers(t, c, ids, workers, 10, 64, nil)
	c.waitSame()
}
