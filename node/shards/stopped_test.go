package shards

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"dsspmesh/mesh"
	"dsspmesh/shardapi"
)

// stoppingReplicas opens replicas whose raft can stop itself, as raft
// does on committing the server's own removal.
type stoppingReplicas struct {
	mu    sync.Mutex
	opens map[uint32]int
	last  map[uint32]*stoppableReplica
}

func (r *stoppingReplicas) HasState(uint32) bool { return false }
func (r *stoppingReplicas) Discard(uint32) error { return nil }

func (r *stoppingReplicas) Open(id uint32, _ ReplicaHooks) (Replica, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.opens[id]++
	rep := &stoppableReplica{}
	r.last[id] = rep
	return rep, nil
}

// stoppableReplica follows until its raft stops itself (stopped), and
// counts the manager's Shutdown calls.
type stoppableReplica struct {
	idleReplica
	mu       sync.Mutex
	stopped  bool
	shutdown int
	diverged *shardapi.Divergence // the FSM's word, before raft stops
}

func (r *stoppableReplica) Status() shardapi.ReplicaStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return shardapi.ReplicaStatus{State: "Shutdown", Diverged: r.diverged}
	}
	return shardapi.ReplicaStatus{State: "Follower", Diverged: r.diverged}
}

func (r *stoppableReplica) Shutdown() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	r.shutdown++
	return nil
}

func (r *stoppableReplica) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
}

// A replica whose raft stopped itself (this node removed from the shard's
// configuration: raft's ShutdownOnRemove) is closed by the manager and,
// where placement still names the node, reopened from its stores for the
// leader to add back; kept open it never voted again and the shard, once
// the leader re-added its node as a voter, had no quorum (the long tier,
// seed 2). A replica placement no longer names is closed, not reopened.
func TestReplicaWhoseRaftStoppedIsReopened(t *testing.T) {
	reps := &stoppingReplicas{opens: map[uint32]int{}, last: map[uint32]*stoppableReplica{}}
	var logged strings.Builder
	live := &members{ids: []mesh.NodeID{"a", "b", "c"}}
	m := New(Deps{ID: "a", Replicas: reps, Members: live, SetPeers: func([]string) error { return nil },
		Logger: slog.New(slog.NewTextHandler(&logged, nil))},
		Config{NumParams: 30, Shards: 3, Replication: 3, Spec: shardapi.Spec{}})
	ctx := context.Background()
	m.sync(ctx)
	if reps.opens[1] != 1 {
		t.Fatalf("opens %v after the first round, want each shard opened once", reps.opens)
	}
	first := reps.last[1]
	first.stop()
	m.sync(ctx)
	if reps.opens[1] != 2 || m.local(1) == Replica(first) || m.local(1) == nil || first.shutdown != 1 {
		t.Fatalf("opens %v, replica %p (stopped %p, closed %d times): want the stopped one closed and shard 1 reopened",
			reps.opens, m.local(1), first, first.shutdown)
	}
	if !strings.Contains(logged.String(), "reopening the replica") {
		t.Fatalf("log does not say the replica was reopened:\n%s", logged.String())
	}
	for range 3 {
		m.sync(ctx)
	}
	if reps.opens[0] != 1 || reps.opens[1] != 2 || reps.opens[2] != 1 {
		t.Fatalf("opens %v: want no further reopening of running replicas", reps.opens)
	}

	// Placement no longer names this node for any shard: a stopped
	// replica is closed and stays closed.
	live.ids = []mesh.NodeID{"b", "c", "d"}
	second := reps.last[1]
	second.stop()
	m.sync(ctx)
	if reps.opens[1] != 2 || m.local(1) != nil || second.shutdown != 1 {
		t.Fatalf("opens %v, replica %v: want the stopped replica of an unplaced shard closed, not reopened", reps.opens, m.local(1))
	}
}

// A replica that diverged stops its own raft before its node hears of it
// (Deps.OnDiverged comes after raft's shutdown): a manager round in
// between sees a stopped replica whose status names its divergence. It is
// left to its eviction and rebuild, not reopened: reopened, it replayed its
// damaged entry again, and closing it ended its wait for the eviction (the
// hostile suite's raft-entry-flip, under four busy loops).
func TestDivergedReplicaIsNotReopened(t *testing.T) {
	reps := &stoppingReplicas{opens: map[uint32]int{}, last: map[uint32]*stoppableReplica{}}
	m := threeShardManager(reps)
	ctx := context.Background()
	m.sync(ctx)
	first := reps.last[1]
	first.mu.Lock()
	first.diverged = &shardapi.Divergence{At: 7, Reason: "its log's copy of the entry at index 7 is damaged", Damaged: true}
	first.mu.Unlock()
	first.stop()
	m.sync(ctx)
	if reps.opens[1] != 1 || m.local(1) != Replica(first) || first.shutdown != 0 {
		t.Fatalf("opens %v, closed %d times: want the diverged replica kept for its eviction, not closed and reopened", reps.opens, first.shutdown)
	}
}

// slowStop is a replica whose Shutdown waits for release.
type slowStop struct {
	*stoppableReplica
	entered, release chan struct{}
}

func (r slowStop) Shutdown() error {
	close(r.entered)
	<-r.release
	return r.stoppableReplica.Shutdown()
}

// slowReplicas opens slowStop replicas and counts discards.
type slowReplicas struct {
	stoppingReplicas
	slow      map[uint32]slowStop
	discarded map[uint32]int
}

func (r *slowReplicas) Open(id uint32, h ReplicaHooks) (Replica, error) {
	rep, _ := r.stoppingReplicas.Open(id, h)
	s := slowStop{rep.(*stoppableReplica), make(chan struct{}), make(chan struct{})}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.slow[id] = s
	return s, nil
}

func (r *slowReplicas) Discard(id uint32) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.discarded[id]++
	return nil
}

// An evicted diverged replica is shut down and its stores discarded
// before the shard's replica opens again: a manager round while the
// shutdown is slow opened it on the stores being removed (the hostile
// suite's raft-entry-flip: the rebuilt node later crashed in raft, "log
// not found").
func TestRebuildOpensNothingUntilDiscarded(t *testing.T) {
	reps := &slowReplicas{stoppingReplicas: stoppingReplicas{opens: map[uint32]int{}, last: map[uint32]*stoppableReplica{}},
		slow: map[uint32]slowStop{}, discarded: map[uint32]int{}}
	m := threeShardManager(reps)
	ctx := context.Background()
	m.sync(ctx)
	old := reps.slow[1]
	done := make(chan struct{})
	go func() { m.rebuild(1); close(done) }()
	<-old.entered
	m.sync(ctx) // the old replica is shutting down, its stores not yet discarded
	reps.mu.Lock()
	opens := reps.opens[1]
	reps.mu.Unlock()
	if opens != 1 {
		t.Fatalf("shard 1 opened %d times while its evicted replica shut down, want 1 (not reopened before the discard)", opens)
	}
	close(old.release)
	<-done
	m.sync(ctx)
	if reps.opens[1] != 2 || reps.discarded[1] != 1 {
		t.Fatalf("opens %v, discards %v: want shard 1 discarded once, then opened afresh", reps.opens, reps.discarded)
	}
}

// threeShardManager is node a's manager of three shards over replicas,
// members a, b and c, every shard placed on it.
func threeShardManager(replicas Replicas) *Manager {
	live := &members{ids: []mesh.NodeID{"a", "b", "c"}}
	return New(Deps{ID: "a", Replicas: replicas, Members: live, SetPeers: func([]string) error { return nil },
		Logger: slog.New(slog.DiscardHandler)},
		Config{NumParams: 30, Shards: 3, Replication: 3, Spec: shardapi.Spec{}})
}
