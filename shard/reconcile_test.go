package shard

import (
	"context"
	"slices"
	"testing"
	"time"

	"dsspmesh/clock"
	"dsspmesh/mesh"
	"dsspmesh/shardapi"
)

// TestReconcileReplacesLeader moves a 3-replica shard to a set that drops
// the leader and adds a new node: the new node is caught up before any
// removal, the group never has fewer than 3 voters, and it ends identical.
func TestReconcileReplacesLeader(t *testing.T) {
	const n = 16
	c := newCluster(t, 7)
	ids := nodeIDs(4)
	spec := shardapi.Spec{Shard: 7, Len: n, Policy: "ssp:2", Optimizer: shardapi.DefaultOptimizer()}
	c.boot(ids[:3], spec, make([]float32, n))
	runWorkers(t, c, ids[:3], []clock.WorkerID{"a", "b"}, 10, n, nil)
	c.start(ids[3])
	old := c.waitLeader("")
	var desired []mesh.NodeID
	for _, id := range ids {
		if id != old.cfg.ID {
			desired = append(desired, id)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for step := 0; ; step++ {
		if step > 10 {
			t.Fatal("reconcile did not converge")
		}
		l := c.waitLeader("")
		done, err := l.Reconcile(ctx, desired)
		if err != nil {
			t.Logf("step %d on %s: %v", step, l.cfg.ID, err)
			continue
		}
		voters := configVoters(t, c.waitLeader(""))
		if len(voters) < 3 {
			t.Fatalf("step %d: only %d voters %v", step, len(voters), voters)
		}
		t.Logf("step %d on %s: voters %v", step, l.cfg.ID, voters)
		if done {
			break
		}
	}
	l := c.waitLeader("")
	if got := configVoters(t, l); !slices.Equal(got, desired) {
		t.Fatalf("voters %v, want %v", got, desired)
	}
	c.kill(old.cfg.ID)
	runWorkers(t, c, desired, []clock.WorkerID{"a", "b"}, 20, n, nil)
	c.waitSame()
	if st := c.replica(ids[3]).Status(); st.Pushes != 40 {
		t.Fatalf("new replica applied %d pushes, want 40", st.Pushes)
	}
}

func configVoters(t *testing.T, r *Replica) []mesh.NodeID {
	c, err := r.Configuration()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(c.Voters)
	return c.Voters
}
