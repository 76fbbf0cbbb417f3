package shard

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"dsspmesh/clock"
	"dsspmesh/internal/testlogger"
	"dsspmesh/internal/wait"
	"dsspmesh/mesh"
	"dsspmesh/raftstore"
	"dsspmesh/shardapi"
)

// cluster is an in-process shard over mesh's in-memory transport: each
// node has its own mesh transport carrying both raft (through the real
// StreamLayer) and worker RPCs.
type cluster struct {
	t      testing.TB
	shard  uint32
	net    *mesh.InmemNetwork
	logger *slog.Logger
	cfg    func(id mesh.NodeID) Config
	stores func(id mesh.NodeID) *raftstore.Stores
	clock  WallClock // nil: SystemClock

	mu   sync.Mutex
	trs  map[mesh.NodeID]*mesh.InmemTransport
	reps map[mesh.NodeID]*Replica
	logs map[mesh.NodeID]*appliedLog

	clients int
	// placement, if set, is the replicas the cluster vouches for (as a
	// node's placement does); nil vouches for every live replica.
	placement []mesh.NodeID
}

// appliedLog records what one replica's FSM applied, in order.
type appliedLog struct {
	mu    sync.Mutex
	all   []shardapi.Applied
	terms []uint64 // terms this replica reported leading (Deps.OnLeader)
	// hold, if set, is called at the end of every Apply (under the FSM's
	// lock), before the entry is recorded: a test blocks applies in it.
	hold func(shardapi.Applied)
}

func (l *appliedLog) led(term uint64) { l.mu.Lock(); l.terms = append(l.terms, term); l.mu.Unlock() }

func (l *appliedLog) ledTerms() []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]uint64(nil), l.terms...)
}

func (l *appliedLog) add(a shardapi.Applied) {
	l.mu.Lock()
	hold := l.hold
	l.mu.Unlock()
	if hold != nil {
		hold(a)
	}
	l.mu.Lock()
	l.all = append(l.all, a)
	l.mu.Unlock()
}

func (l *appliedLog) snapshot() []shardapi.Applied {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]shardapi.Applied(nil), l.all...)
}

func testLogger(t testing.TB) *slog.Logger { return testlogger.New(t, slog.LevelWarn) }

func fastConfig(shard uint32, id mesh.NodeID) Config {
	c := DefaultConfig(shard, id)
	c.HeartbeatTimeout = 50 * time.Millisecond
	c.ElectionTimeout = 50 * time.Millisecond
	c.LeaderLeaseTimeout = 50 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
	c.SnapshotInterval = 50 * time.Millisecond
	c.SnapshotThreshold = 1 << 20
	c.HeldKeepAlive = 50 * time.Millisecond
	return c
}

func newCluster(t testing.TB, shard uint32) *cluster {
	c := &cluster{t: t, shard: shard, net: mesh.NewInmemNetwork(), logger: testLogger(t),
		trs: map[mesh.NodeID]*mesh.InmemTransport{}, reps: map[mesh.NodeID]*Replica{}, logs: map[mesh.NodeID]*appliedLog{}}
	c.cfg = func(id mesh.NodeID) Config { return fastConfig(shard, id) }
	inmem := map[mesh.NodeID]*raftstore.Stores{}
	c.stores = func(id mesh.NodeID) *raftstore.Stores {
		// In-memory stores outlive a replica, so a restart finds its data.
		if inmem[id] == nil {
			inmem[id] = raftstore.NewInmem()
		}
		return inmem[id]
	}
	t.Cleanup(func() {
		c.mu.Lock()
		ids := make([]mesh.NodeID, 0, len(c.reps))
		for id := range c.reps {
			ids = append(ids, id)
		}
		c.mu.Unlock()
		for _, id := range ids {
			c.kill(id)
		}
	})
	return c
}

func (c *cluster) resolve(id mesh.NodeID) (string, error) { return string(id), nil }

// placed vouches for every replica the cluster runs, as the node's
// placement does for a shard's replicas: a follower whose configuration
// lags (it has not yet learnt of a voter the leader added) must still let
// that voter in, or it could never be brought up to date by it.
func (c *cluster) placed(id mesh.NodeID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.placement != nil {
		return slices.Contains(c.placement, id)
	}
	_, ok := c.trs[id]
	return ok
}

// start starts (or restarts) the replica on id.
func (c *cluster) start(id mesh.NodeID) *Replica {
	c.t.Helper()
	tr, err := c.net.NewTransport(id, string(id), mesh.DefaultFrameLimits())
	if err != nil {
		c.t.Fatal(err)
	}
	rt, err := raftstore.NewMeshTransport(tr, c.shard, c.resolve, c.logger.With("node", id))
	if err != nil {
		c.t.Fatal(err)
	}
	l := &appliedLog{}
	clk := c.clock
	if clk == nil {
		clk = SystemClock{}
	}
	r, err := NewReplica(c.cfg(id), Deps{Transport: tr, Resolve: c.resolve, RaftTransport: rt, Stores: c.stores(id),
		Clock: clk, Logger: c.logger.With("node", id), Observer: l.add, OnLeader: l.led,
		AllowRaftPeer: c.placed})
	if err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.trs[id], c.reps[id], c.logs[id] = tr, r, l
	c.mu.Unlock()
	return r
}

// kill cuts id off the network, then stops its replica.
func (c *cluster) kill(id mesh.NodeID) {
	c.mu.Lock()
	tr, r := c.trs[id], c.reps[id]
	delete(c.trs, id)
	delete(c.reps, id)
	c.mu.Unlock()
	if tr != nil {
		tr.Close()
	}
	if r != nil {
		r.Shutdown()
	}
}

func (c *cluster) replica(id mesh.NodeID) *Replica {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reps[id]
}

func (c *cluster) live() map[mesh.NodeID]*Replica {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[mesh.NodeID]*Replica{}
	for id, r := range c.reps {
		out[id] = r
	}
	return out
}

// boot starts ids, bootstraps them as voters and initialises the shard.
func (c *cluster) boot(ids []mesh.NodeID, spec shardapi.Spec, theta []float32) {
	c.t.Helper()
	for _, id := range ids {
		c.start(id)
	}
	if err := c.replica(ids[0]).Bootstrap(ids); err != nil {
		c.t.Fatal(err)
	}
	// Init is ambiguous when leadership moves under it: retry until a
	// replica reports the shard initialised (a second Init is refused).
	c.waitFor(10*time.Second, "the shard initialised", func() bool {
		l := c.waitLeader("")
		if err := l.Init(context.Background(), spec, theta); err != nil {
			c.t.Logf("init on %s: %v", l.cfg.ID, err)
		}
		return l.FSM().Status().Initialized
	})
}

// bootZeros boots replicas voters of a shard of n zero parameters under
// policy with the default optimizer, and returns their ids.
func (c *cluster) bootZeros(replicas, n int, policy string) []mesh.NodeID {
	c.t.Helper()
	ids := nodeIDs(replicas)
	spec := testSpec(n, policy)
	spec.Shard = c.shard
	c.boot(ids, spec, make([]float32, n))
	return ids
}

// waitLeader waits for a live replica other than not to lead.
func (c *cluster) waitLeader(not mesh.NodeID) *Replica {
	c.t.Helper()
	var leader *Replica
	c.waitFor(10*time.Second, "a leader", func() bool {
		for id, r := range c.live() {
			if id != not && r.IsLeader() {
				leader = r
				return true
			}
		}
		return false
	})
	return leader
}

func (c *cluster) waitFor(d time.Duration, what string, cond func() bool) {
	c.t.Helper()
	wait.For(c.t, d, what, cond)
}

// waitSame waits until every live replica has the same applied index and
// state hash, and returns the hash.
func (c *cluster) waitSame() [32]byte {
	c.t.Helper()
	var h [32]byte
	c.waitFor(10*time.Second, "identical replicas", func() bool {
		first := true
		for _, r := range c.live() {
			x := r.FSM().StateHash()
			if first {
				h, first = x, false
			} else if x != h {
				return false
			}
		}
		return true
	})
	return h
}

func (c *cluster) client(w clock.WorkerID, ids []mesh.NodeID) *shardapi.Client {
	c.t.Helper()
	cfg := shardapi.DefaultClientConfig(c.shard, w, func() []mesh.NodeID { return ids })
	cfg.ReplyTimeout = 500 * time.Millisecond
	cfg.Deadline = 20 * time.Second
	c.mu.Lock()
	c.clients++
	addr := fmt.Sprintf("wk-%s-%d", w, c.clients)
	c.mu.Unlock()
	tr, err := c.net.NewTransport(mesh.NodeID(w), addr, mesh.DefaultFrameLimits())
	if err != nil {
		c.t.Fatal(err)
	}
	cl, err := shardapi.NewClient(cfg, tr, c.resolve, c.logger.With("worker", w))
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cl.Close(); tr.Close() })
	return cl
}

// gradFor is worker w's deterministic gradient for iteration iter.
func gradFor(w clock.WorkerID, iter int64, n int) []float32 {
	g := make([]float32, n)
	seed := uint32(iter*7919) ^ uint32(len(w))*2654435761
	for _, b := range []byte(w) {
		seed = seed*31 + uint32(b)
	}
	for i := range g {
		seed = seed*1664525 + 1013904223
		g[i] = float32(int32(seed>>8)%2000) / 1000
	}
	return g
}

func nodeIDs(n int) []mesh.NodeID {
	ids := make([]mesh.NodeID, n)
	for i := range ids {
		ids[i] = mesh.NodeID(fmt.Sprintf("n%d", i+1))
	}
	return ids
}
