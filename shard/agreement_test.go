package shard

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"dsspmesh/clock"
	"dsspmesh/mesh"
	"dsspmesh/raftstore"
	"dsspmesh/shardapi"
)

// agreeCluster is a 3-replica shard of 64 parameters whose replicas
// digest their state every 8 entries; fresh(id) gives id empty stores
// at its next start, as a node that rebuilds a replica does.
func agreeCluster(t *testing.T) (c *cluster, ids []mesh.NodeID, fresh func(mesh.NodeID)) {
	c = newCluster(t, 5)
	c.cfg = func(id mesh.NodeID) Config {
		cfg := fastConfig(5, id)
		cfg.CheckEvery, cfg.CheckWait = 8, time.Second
		return cfg
	}
	stores := map[mesh.NodeID]*raftstore.Stores{}
	c.stores = func(id mesh.NodeID) *raftstore.Stores {
		if stores[id] == nil {
			stores[id] = raftstore.NewInmem()
		}
		return stores[id]
	}
	return c, c.bootZeros(3, 64, "ssp:3"), func(id mesh.NodeID) { delete(stores, id) }
}

// flip changes r's state as a bit flipped in its memory would.
func flip(r *Replica) {
	f := r.fsm
	f.mu.Lock()
	defer f.mu.Unlock()
	p := &f.st.params
	p.theta = slices.Clone(p.theta) // a snapshot may share it
	p.theta[3] += 0.25
}

// rebuild does what a node does with a replica its leader evicted: stops
// it, opens it afresh on empty stores, and lets the leader reconcile the
// shard back to ids; the replicas end identical.
func rebuild(t *testing.T, c *cluster, ids []mesh.NodeID, fresh func(mesh.NodeID), victim mesh.NodeID) {
	t.Helper()
	c.kill(victim)
	fresh(victim)
	c.start(victim)
	c.waitFor(30*time.Second, "the shard reconciled to its three replicas", func() bool {
		done, _ := c.waitLeader(victim).Reconcile(context.Background(), ids)
		return done
	})
}

// waitEvicted waits until victim diverged, was evicted by the leader and
// knows it, and checks that the leader's configuration leaves it out.
func waitEvicted(t *testing.T, c *cluster, victim mesh.NodeID, wantDamaged bool) shardapi.ReplicaStatus {
	t.Helper()
	var st shardapi.ReplicaStatus
	c.waitFor(20*time.Second, "the diverged replica evicted", func() bool {
		st = c.replica(victim).Status()
		return st.Diverged != nil && st.Evicted
	})
	if st.State != "Shutdown" || st.Diverged.Damaged != wantDamaged {
		t.Fatalf("diverged replica: raft %s, divergence %+v (damaged %v wanted)", st.State, st.Diverged, wantDamaged)
	}
	cfg, err := c.waitLeader(victim).Configuration()
	if err != nil || cfg.Has(victim) {
		t.Fatalf("the leader's configuration %+v still holds the evicted %s (%v)", cfg, victim, err)
	}
	return st
}

// TestAgreementRebuildsADivergedFollower flips a parameter in a
// follower's memory: the next check names it, it stops (raft shut down:
// no vote, no service), the leader evicts it, it learns so, and rebuilt
// on empty stores it catches up and agrees at the next check.
func TestAgreementRebuildsADivergedFollower(t *testing.T) {
	c, ids, fresh := agreeCluster(t)
	workers := []clock.WorkerID{"a", "b"}
	runWorkers(t, c, ids, workers, 10, 64, nil)
	leader := c.waitLeader("")
	c.waitSame()
	var victim mesh.NodeID
	for _, id := range ids {
		if id != leader.cfg.ID {
			victim = id
		}
	}
	flip(c.replica(victim))
	runWorkers(t, c, ids, workers, 30, 64, nil)
	st := waitEvicted(t, c, victim, false)
	t.Logf("%s: %s", victim, st.Diverged.Reason)
	// The shard trained on with two replicas meanwhile.
	runWorkers(t, c, ids, workers, 40, 64, nil)
	rebuild(t, c, ids, fresh, victim)
	runWorkers(t, c, ids, workers, 60, 64, nil)
	c.waitSame()
	c.waitFor(20*time.Second, "the rebuilt replica matching a check", func() bool {
		rs := c.replica(victim).Status()
		return rs.Checks.Matched > 0 && rs.Diverged == nil
	})
	if named := c.waitLeader("").Status().Checks.Named; len(named) > 0 {
		t.Fatalf("replicas still named after the rebuild: %v", named)
	}
}

// TestAgreementEvictsADivergedLeader flips a parameter in the leader's
// memory: its own check names it (the followers' two digests are the
// majority), it steps down by stopping, and the new leader evicts it.
func TestAgreementEvictsADivergedLeader(t *testing.T) {
	c, ids, fresh := agreeCluster(t)
	workers := []clock.WorkerID{"a", "b"}
	runWorkers(t, c, ids, workers, 10, 64, nil)
	leader := c.waitLeader("")
	c.waitSame()
	victim := leader.cfg.ID
	flip(leader)
	runWorkers(t, c, ids, workers, 30, 64, nil)
	waitEvicted(t, c, victim, false)
	rebuild(t, c, ids, fresh, victim)
	runWorkers(t, c, ids, workers, 50, 64, nil)
	c.waitSame()
}

// TestAgreementRebuildsAReplicaWithADamagedEntry flips one byte of a push
// entry in a stopped follower's raft.db: restarted, it reads the entry
// back, finds its checksum failing, diverges before applying it, and is
// evicted; rebuilt from its peers it holds their state.
func TestAgreementRebuildsAReplicaWithADamagedEntry(t *testing.T) {
	c, dirs := diskCluster(t, 5, 1<<20, 4)
	c.cfg = func(id mesh.NodeID) Config {
		cfg := fastConfig(5, id)
		cfg.CheckEvery, cfg.CheckWait = 8, time.Second
		return cfg
	}
	ids := c.bootZeros(3, 64, "ssp:3")
	workers := []clock.WorkerID{"a", "b"}
	runWorkers(t, c, ids, workers, 10, 64, nil)
	leader := c.waitLeader("")
	c.waitSame()
	var victim mesh.NodeID
	for _, id := range ids {
		if id != leader.cfg.ID {
			victim = id
		}
	}
	c.kill(victim)
	flipPushEntry(t, filepath.Join(raftstore.ShardDir(dirs[victim], 5), "raft.db"))
	c.start(victim)
	runWorkers(t, c, ids, workers, 30, 64, nil)
	st := waitEvicted(t, c, victim, true)
	t.Logf("%s: %s", victim, st.Diverged.Reason)
	c.kill(victim)
	dirs[victim] = "" // diskCluster's stores: a fresh folder at the next start
	c.start(victim)
	c.waitFor(30*time.Second, "the shard reconciled to its three replicas", func() bool {
		done, _ := c.waitLeader(victim).Reconcile(context.Background(), ids)
		return done
	})
	runWorkers(t, c, ids, workers, 50, 64, nil)
	c.waitSame()
}

// checkedShard is shard 5 on three disk-backed replicas with the
// agreement check every 8 entries, trained 10 iterations by two workers:
// its leader, a follower (victim) and the other ids.
type checkedShard struct {
	c           *cluster
	dirs        map[mesh.NodeID]string
	ids, others []mesh.NodeID
	workers     []clock.WorkerID
	leader      *Replica
	victim      mesh.NodeID
}

func newCheckedShard(t *testing.T) checkedShard {
	c, dirs := diskCluster(t, 5, 1<<20, 4)
	c.cfg = func(id mesh.NodeID) Config {
		cfg := fastConfig(5, id)
		cfg.CheckEvery, cfg.CheckWait = 8, time.Second
		return cfg
	}
	f := checkedShard{c: c, dirs: dirs, ids: c.bootZeros(3, 64, "ssp:3"), workers: []clock.WorkerID{"a", "b"}}
	runWorkers(t, c, f.ids, f.workers, 10, 64, nil)
	f.leader = c.waitLeader("")
	c.waitSame()
	for _, id := range f.ids {
		if id != f.leader.cfg.ID && f.victim == "" {
			f.victim = id
		} else {
			f.others = append(f.others, id)
		}
	}
	return f
}

// TestReconcileLeavesANamedReplicaToItsEviction: a replica killed is
// dropped from the configuration, restarts on a damaged log (it diverges
// at once) and is added back as a non-voter by the leader's reconcile,
// which waits for it to catch up, with a minute to wait, as a node's
// shard manager does, step after step. The check names it; the wait then
// gives up, so the eviction gets the configuration slot and the replica
// is evicted within the check's time, not starved by waits that never end.
func TestReconcileLeavesANamedReplicaToItsEviction(t *testing.T) {
	f := newCheckedShard(t)
	c, dirs, ids, workers, leader, victim, others := f.c, f.dirs, f.ids, f.workers, f.leader, f.victim, f.others
	c.kill(victim)
	c.waitFor(30*time.Second, "the shard reconciled to the two others", func() bool {
		done, _ := leader.Reconcile(context.Background(), others)
		return done
	})
	flipPushEntry(t, filepath.Join(raftstore.ShardDir(dirs[victim], 5), "raft.db"))
	c.start(victim)
	run, stop := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-run.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(run, time.Minute)
			leader.Reconcile(ctx, ids)
			cancel()
		}
	}()
	defer func() { stop(); <-stopped }()
	runWorkers(t, c, others, workers, 30, 64, nil)
	var st shardapi.ReplicaStatus
	c.waitFor(20*time.Second, "the diverged replica evicted", func() bool {
		st = c.replica(victim).Status()
		return st.Diverged != nil && st.Evicted
	})
	if !st.Diverged.Damaged {
		t.Fatalf("divergence %+v, want its damaged entry", st.Diverged)
	}
	t.Logf("%s: %s", victim, st.Diverged.Reason)
}

// TestEvictionComesBeforeAWaitThatNeverEnds: the placement names a member
// that hosts nothing ("ghost": a mesh-key holder in gossip runs no
// replica) before a voter that then restarts on a damaged log. The
// leader's reconcile adds the ghost and waits for it to catch up, with a
// minute to wait, step after step, as a node's shard manager does; the
// wait never ends on its own. The check names the diverged voter; the
// wait gives way, so the eviction gets the configuration slot within the
// check's time (the hostile suite's raft-entry-flip, late in its shared
// mesh, where the hostile client was placed).
func TestEvictionComesBeforeAWaitThatNeverEnds(t *testing.T) {
	f := newCheckedShard(t)
	c, dirs, workers, leader, victim, others := f.c, f.dirs, f.workers, f.leader, f.victim, f.others
	desired := []mesh.NodeID{leader.cfg.ID, "ghost", victim}
	run, stop := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	waiting := make(chan struct{})
	go func() {
		defer close(stopped)
		for first := true; ; first = false {
			ctx, cancel := context.WithTimeout(run, time.Minute)
			if first {
				close(waiting)
			}
			leader.Reconcile(ctx, desired)
			cancel()
			select {
			case <-run.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	defer func() { stop(); <-stopped }()
	<-waiting
	c.waitFor(10*time.Second, "the ghost added as a non-voter", func() bool {
		cfg, err := leader.Configuration()
		return err == nil && slices.Contains(cfg.Nonvoters, "ghost")
	})
	c.kill(victim)
	flipPushEntry(t, filepath.Join(raftstore.ShardDir(dirs[victim], 5), "raft.db"))
	c.start(victim)
	runWorkers(t, c, others, workers, 30, 64, nil)
	var st shardapi.ReplicaStatus
	c.waitFor(20*time.Second, "the diverged replica evicted", func() bool {
		st = c.replica(victim).Status()
		return st.Diverged != nil && st.Evicted
	})
	t.Logf("%s: %s", victim, st.Diverged.Reason)
}

// flipPushEntry flips a byte inside the gradient of the first push entry
// of the closed log database path.
func flipPushEntry(t *testing.T, path string) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	flipped := false
	err = db.Update(func(tx *bbolt.Tx) error {
		logs := tx.Bucket([]byte("logs"))
		c := logs.Cursor()
		for k, v := c.First(); k != nil && !flipped; k, v = c.Next() {
			// A push entry's data starts with its kind, 2; its gradient
			// (64 float32) ends the data, before the store's trailer.
			if v == nil || !bytes.Contains(v, []byte{byte(entryPush), 0, 0}) {
				continue
			}
			v = bytes.Clone(v)
			v[len(v)-40] ^= 0x40
			if err := logs.Put(k, v); err != nil {
				return err
			}
			flipped = true
		}
		return nil
	})
	if err != nil || !flipped {
		t.Fatalf("flip a push entry: %v (found one: %v)", err, flipped)
	}
}
