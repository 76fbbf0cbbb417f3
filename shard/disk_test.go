package shard

import (
	"io/fs"
	"path/filepath"
	"testing"
	"time"

	"dsspmesh/clock"
	"dsspmesh/mesh"
	"dsspmesh/raftstore"
)

// diskCluster is a cluster whose replicas keep raftstore's disk stores under dirs.
func diskCluster(t testing.TB, shard uint32, snapshotThreshold, trailing uint64) (*cluster, map[mesh.NodeID]string) {
	c := newCluster(t, shard)
	dirs := map[mesh.NodeID]string{}
	c.stores = func(id mesh.NodeID) *raftstore.Stores {
		if dirs[id] == "" {
			dirs[id] = t.TempDir()
			// Cleanups run last first: stop the replica before its
			// folder is removed, or a snapshot it still writes races
			// the removal.
			t.Cleanup(func() { c.kill(id) })
		}
		s, err := raftstore.Open(dirs[id], shard, raftstore.DefaultConfig(), c.logger)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	c.cfg = func(id mesh.NodeID) Config {
		cfg := fastConfig(shard, id)
		cfg.SnapshotThreshold, cfg.TrailingLogs = snapshotThreshold, trailing
		return cfg
	}
	return c, dirs
}

func dirSize(t testing.TB, dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// TestRestartFromDiskCatchesUp stops a follower, lets the leader snapshot
// and truncate its log past the follower's position, and restarts the
// follower on its data directory: it catches up to the same state.
func TestRestartFromDiskCatchesUp(t *testing.T) {
	const n = 256
	c, _ := diskCluster(t, 8, 8, 4)
	ids := c.bootZeros(3, n, "ssp:3")
	workers := []clock.WorkerID{"a", "b", "c"}
	runWorkers(t, c, ids, workers, 10, n, nil)
	leader := c.waitLeader("")
	var victim mesh.NodeID
	for _, id := range ids {
		if id != leader.cfg.ID {
			victim = id
		}
	}
	c.waitSame()
	before := c.replica(victim).FSM().AppliedIndex()
	c.kill(victim)
	runWorkers(t, c, ids, workers, 60, n, nil)
	c.waitFor(10*time.Second, "a leader snapshot past the stopped follower", func() bool {
		snaps, err := leader.deps.Stores.Snapshots.List()
		return err == nil && len(snaps) > 0 && snaps[0].Index > before+4
	})
	r := c.start(victim)
	hash := c.waitSame()
	if st := r.Status(); st.Pushes != 180 {
		t.Fatalf("restarted replica has %d pushes, want 180", st.Pushes)
	}
	first, _ := leader.deps.Stores.Log.FirstIndex()
	t.Logf("leader's log now starts at %d; restarted replica's last snapshot index %s",
		first, r.raft.Stats()["last_snapshot_index"])
	t.Logf("restarted %s (stopped at index %d) caught up to %x", victim, before, hash[:6])
}
