package node_test

import (
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"dsspmesh/clock"
	"dsspmesh/internal/testlogger"
	"dsspmesh/mesh"
	"dsspmesh/node"
	"dsspmesh/node/assemble"
	"dsspmesh/node/datadir"
	"dsspmesh/node/records"
	"dsspmesh/node/shards"
	"dsspmesh/shardapi"
)

// TestInProcessMeshLosesANodeAndRecovers runs four nodes in this process
// over mesh's in-memory transport and membership, with real shard replicas
// (raft over bbolt in temporary folders): they join, train, lose the
// leader of shard 0 to a crash (its transport closed, membership declaring
// it failed), and the three survivors remove its worker from every shard,
// elect new leaders and keep training. Waits are on what the nodes report
// to their Observer, never on sleeps.
func TestInProcessMeshLosesANodeAndRecovers(t *testing.T) {
	const (
		nodes  = 4
		shards = 2
		iters  = 5 // iterations each worker completes before and after the crash
	)
	rec := newRecorder()
	m := startMesh(t, nodes, shards, rec)

	// Crash only once every shard has its three voters: a group of two
	// that loses one has no quorum until the node comes back.
	rec.wait(t, "every worker trains and every shard has 3 voters", func() bool {
		return rec.allAcked(m.ids(), iters) && m.fullyReplicated(shards, 3)
	})
	victim := rec.leaderOf(0)
	if victim == "" {
		t.Fatal("no node reported leading shard 0")
	}
	t.Logf("crashing %s, leader of shard 0", victim)
	from := rec.ackedSnapshot()
	m.crash(victim)

	survivors := m.ids()
	rec.wait(t, "the crashed worker removed from every shard", func() bool { return rec.removedEverywhere(victim, shards) })
	rec.wait(t, "the survivors train on", func() bool {
		for _, id := range survivors {
			if rec.ackedOn(id) < from[id]+iters {
				return false
			}
		}
		return true
	})
	rec.wait(t, "a new leader of shard 0", func() bool { l := rec.leaderOf(0); return l != "" && l != victim })
	m.stop(t)
}

// inprocMesh is a set of nodes run by node.Run on one in-memory network.
type inprocMesh struct {
	net     *mesh.InmemNetwork
	members *mesh.InmemCluster

	mu    sync.Mutex
	nodes map[mesh.NodeID]*inprocNode
	order []mesh.NodeID // the nodes as startMesh made them
}

type inprocNode struct {
	tr       *mesh.InmemTransport
	replicas *trackedReplicas
	cancel   context.CancelFunc
	done     chan error
	http     string // its HTTP listener's address
	trains   bool
	dir      string // its data directory
	key      ed25519.PrivateKey
}

// trackedReplicas keeps the replicas a node opens, so the test can read
// their Raft configuration.
type trackedReplicas struct {
	shards.Replicas
	mu   sync.Mutex
	open map[uint32]shards.Replica
}

func (r *trackedReplicas) Open(id uint32, hooks shards.ReplicaHooks) (shards.Replica, error) {
	rep, err := r.Replicas.Open(id, hooks)
	if err == nil {
		r.mu.Lock()
		r.open[id] = rep
		r.mu.Unlock()
	}
	return rep, err
}

func (r *trackedReplicas) get(id uint32) shards.Replica {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.open[id]
}

func (r *trackedReplicas) leader(id uint32) shards.Replica {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rep := r.open[id]; rep != nil && rep.IsLeader() {
		return rep
	}
	return nil
}

func startMesh(t *testing.T, n, shardCount int, rec *recorder, configure ...func(i int, c *node.Config)) *inprocMesh {
	m := &inprocMesh{net: mesh.NewInmemNetwork(), members: mesh.NewInmemCluster(), nodes: map[mesh.NodeID]*inprocNode{}}
	dirs := make([]string, n)
	for i := range dirs {
		dirs[i] = t.TempDir()
	}
	log := testlogger.New(t, slog.LevelWarn)
	t.Cleanup(func() { m.stop(t) }) // before the folders are removed: cleanups run last first
	seed := ""
	for i := range n {
		cfg := node.DefaultConfig()
		cfg.DataDir = dirs[i]
		cfg.Insecure = true
		cfg.GossipPort, cfg.QUICPort = 7000+2*i, 7001+2*i
		cfg.Threads = 1
		cfg.EvalEvery = time.Hour
		cfg.LeaveTimeout = time.Second
		cfg.Spec.Model, cfg.Spec.Dataset = "mlp", "synthetic-mnist"
		cfg.Spec.Paradigm, cfg.Spec.SLower = "ssp", 2 // the survivors wait for a dead worker until it is removed
		cfg.Spec.BatchSize, cfg.Spec.Shards, cfg.Spec.Replication = 16, shardCount, 3
		// Less than the default 0.05: at batch 16 with momentum 0.9 under
		// ssp:2 the synthetic job drove its loss to ~1e-5 and then
		// diverged on a loaded machine (every gradient an outlier, the
		// workers stopped: TestEvalClaimsOverTheControlChannel in a
		// CI-like run; reliability.md bug 25). These tests are about the
		// mesh, not the job's rate.
		cfg.Spec.LR = 0.02
		for _, f := range configure {
			f(i, &cfg)
		}
		if seed != "" {
			cfg.Join = []string{seed}
		}
		dir, err := datadir.Open(cfg.DataDir)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := m.net.NewTransport(dir.ID, cfg.QUICAddr(), mesh.DefaultFrameLimits())
		if err != nil {
			t.Fatal(err)
		}
		meta := mesh.Meta{ID: dir.ID, QUICAddr: tr.Addr(), Trains: cfg.Train, Backend: cfg.Backend, Proto: mesh.ProtocolVersion}
		members, err := m.members.NewMember(meta, cfg.GossipAddr())
		if err != nil {
			t.Fatal(err)
		}
		if seed == "" {
			// The first node founds the gossip domain by joining itself,
			// as a lone memberlist node is a cluster of one.
			if _, err := members.Join(context.Background(), []string{cfg.GossipAddr()}); err != nil {
				t.Fatal(err)
			}
			seed = cfg.GossipAddr()
		}
		replicas := &trackedReplicas{open: map[uint32]shards.Replica{}, Replicas: &assemble.RaftReplicas{
			DataDir: dir.Path, Transport: tr, Resolve: mesh.ResolveFromMembership(members), Logger: log.With("node", dir.ID)}}
		httpLn, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		deps := node.Deps{Dir: dir, Transport: tr, Membership: members, Replicas: replicas, Logger: log, Observer: rec.node(dir.ID), HTTP: httpLn,
			VerifyOperator: verifyTestOperator}
		ctx, cancel := context.WithCancel(context.Background())
		nd := &inprocNode{tr: tr, replicas: replicas, cancel: cancel, done: make(chan error, 1), http: httpLn.Addr().String(), trains: cfg.Train, dir: cfg.DataDir, key: dir.NodeKey}
		go func() { nd.done <- node.Run(ctx, cfg, func(string) bool { return false }, deps) }()
		m.mu.Lock()
		m.nodes[dir.ID] = nd
		m.order = append(m.order, dir.ID)
		m.mu.Unlock()
	}
	return m
}

// testOperatorKey is the mesh key whose operator MAC the in-process nodes
// take (POST /revoke).
var testOperatorKey = mesh.MeshKey{7}

func verifyTestOperator(op, arg string, mac []byte) bool {
	return hmac.Equal(testOperatorKey.OperatorMAC(op, arg), mac)
}

func (m *inprocMesh) ids() []mesh.NodeID {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]mesh.NodeID, 0, len(m.nodes))
	for id := range m.nodes {
		out = append(out, id)
	}
	return out
}

// fullyReplicated reports whether every shard's leader has voters voting
// members and none being caught up, and every one of them has that same
// configuration: a voter that has not yet appended its peer's promotion
// refuses that peer's vote request, and with the leader lost neither can
// then be elected.
func (m *inprocMesh) fullyReplicated(shards, voters int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for s := range uint32(shards) {
		var want []mesh.NodeID
		for _, nd := range m.nodes {
			if rep := nd.replicas.leader(s); rep != nil {
				if c, err := rep.Configuration(); err == nil && len(c.Voters) == voters && len(c.Nonvoters) == 0 {
					want = c.Voters
				}
				break
			}
		}
		if want == nil {
			return false
		}
		for _, v := range want {
			nd := m.nodes[v]
			if nd == nil {
				return false
			}
			rep := nd.replicas.get(s)
			if rep == nil {
				return false
			}
			c, err := rep.Configuration()
			if err != nil || len(c.Nonvoters) != 0 || !sameSet(c.Voters, want) {
				return false
			}
		}
	}
	return true
}

func sameSet(a, b []mesh.NodeID) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(x mesh.NodeID) bool { return !slices.Contains(b, x) })
}

// crash takes id down as kill -9 would: its streams break, membership
// declares it failed, and only then is its process (node.Run) stopped.
func (m *inprocMesh) crash(id mesh.NodeID) {
	m.mu.Lock()
	nd := m.nodes[id]
	delete(m.nodes, id)
	m.mu.Unlock()
	nd.tr.Close()
	m.members.Fail(id)
	nd.cancel()
	<-nd.done
}

// stop ends every node gracefully and checks that Run returned cleanly.
func (m *inprocMesh) stop(t *testing.T) {
	m.mu.Lock()
	nodes := m.nodes
	m.nodes = map[mesh.NodeID]*inprocNode{}
	m.mu.Unlock()
	for _, nd := range nodes {
		nd.cancel()
	}
	for id, nd := range nodes {
		select {
		case err := <-nd.done:
			if err != nil {
				t.Errorf("node %s: %v", id, err)
			}
		case <-time.After(time.Minute):
			t.Errorf("node %s did not stop within a minute", id)
		}
	}
}

// recorder collects what every node reports to its Observer and wakes
// waiters on each report.
type recorder struct {
	mu      sync.Mutex
	changed chan struct{} // closed and replaced at every report
	acked   map[mesh.NodeID]int64
	leaders map[uint32]leadership
	removed map[uint32]map[clock.WorkerID]bool
	samples map[mesh.NodeID]map[int64]int64 // per worker, per iteration acknowledged by shard 0
	pushErr map[mesh.NodeID]string          // per worker, its last failed push's error (wait's timeout shows them)

	reads      int   // slice versions read through the gate
	maxLag     int64 // the largest iteration − t_min among them
	overlapped int   // iterations computed before shard 0 acknowledged the previous one
}

type leadership struct {
	node mesh.NodeID
	term uint64
}

func newRecorder() *recorder {
	return &recorder{changed: make(chan struct{}), acked: map[mesh.NodeID]int64{}, leaders: map[uint32]leadership{},
		removed: map[uint32]map[clock.WorkerID]bool{}, samples: map[mesh.NodeID]map[int64]int64{}, pushErr: map[mesh.NodeID]string{}}
}

func (r *recorder) update(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f()
	close(r.changed)
	r.changed = make(chan struct{})
}

// wait blocks until cond holds, re-checking it after every report, and
// fails the test after a minute.
func (r *recorder) wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	for {
		r.mu.Lock()
		ch := r.changed
		r.mu.Unlock()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-timeout.C:
			r.mu.Lock()
			acked, errs := fmt.Sprint(r.acked), fmt.Sprint(r.pushErr)
			r.mu.Unlock()
			t.Fatalf("timed out waiting for %s (iterations acknowledged by shard 0: %s; last push errors: %s)", what, acked, errs)
		}
	}
}

// ackedOn is the number of iterations id's worker has had acknowledged
// by shard 0.
func (r *recorder) ackedOn(id mesh.NodeID) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.acked[id]
}

func (r *recorder) ackedSnapshot() map[mesh.NodeID]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[mesh.NodeID]int64{}
	for id, n := range r.acked {
		out[id] = n
	}
	return out
}

func (r *recorder) allAcked(ids []mesh.NodeID, n int64) bool {
	for _, id := range ids {
		if r.ackedOn(id) < n {
			return false
		}
	}
	return true
}

func (r *recorder) leaderOf(shard uint32) mesh.NodeID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leaders[shard].node
}

func (r *recorder) removedEverywhere(w mesh.NodeID, shards int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for s := range uint32(shards) {
		if !r.removed[s][clock.WorkerID(w)] {
			return false
		}
	}
	return true
}

// node is the Observer of node id.
func (r *recorder) node(id mesh.NodeID) records.Observer { return nodeObserver{r: r, id: id} }

type nodeObserver struct {
	r  *recorder
	id mesh.NodeID
}

func (o nodeObserver) PushSent(uint32, mesh.NodeID, int64, int64) {}

func (o nodeObserver) Computing(w mesh.NodeID, iter int64, reads []records.SliceRead, _ *shardapi.Assignment) {
	o.r.mu.Lock()
	defer o.r.mu.Unlock()
	if o.r.acked[w] < iter { // push iter−1 not acknowledged yet: in flight
		o.r.overlapped++
	}
	for _, r := range reads {
		if r.Index > 0 && !r.Unchecked {
			o.r.reads++
			o.r.maxLag = max(o.r.maxLag, iter-r.Min)
		}
	}
}

func (o nodeObserver) PushDone(shard uint32, w mesh.NodeID, iter, samples int64, err error) {
	if err != nil {
		o.r.mu.Lock()
		o.r.pushErr[w] = fmt.Sprintf("shard %d iter %d: %v", shard, iter, err)
		o.r.mu.Unlock()
		return
	}
	if shard != 0 || samples == 0 {
		return
	}
	o.r.update(func() {
		o.r.acked[w] = max(o.r.acked[w], iter+1)
		if o.r.samples[w] == nil {
			o.r.samples[w] = map[int64]int64{}
		}
		o.r.samples[w][iter] = samples
	})
}

func (o nodeObserver) Applied(shard uint32, a shardapi.Applied) {
	if a.Kind != "remove-worker" || a.Err != nil {
		return
	}
	o.r.update(func() {
		if o.r.removed[shard] == nil {
			o.r.removed[shard] = map[clock.WorkerID]bool{}
		}
		o.r.removed[shard][a.Worker] = true
	})
}

func (o nodeObserver) Leading(shard uint32, term uint64) {
	o.r.update(func() {
		if term >= o.r.leaders[shard].term {
			o.r.leaders[shard] = leadership{node: o.id, term: term}
		}
	})
}

func (o nodeObserver) StateHashEvery() uint64 { return 0 }
