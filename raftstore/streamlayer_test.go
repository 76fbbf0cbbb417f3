package raftstore

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"dsspmesh/internal/wait"
	"dsspmesh/mesh"
)

type countFSM struct {
	mu sync.Mutex
	n  int
}

func (f *countFSM) Apply(*raft.Log) any { f.mu.Lock(); f.n++; f.mu.Unlock(); return nil }
func (f *countFSM) Snapshot() (raft.FSMSnapshot, error) {
	return nil, fmt.Errorf("countFSM: no snapshots in this test")
}
func (f *countFSM) Restore(io.ReadCloser) error { return nil }

type slTestWriter struct{ t testing.TB }

func (w slTestWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestRaftOverQUICStreamLayer runs a 3-node raft group over real QUIC on
// loopback, commits, closes the leader's transport and waits for a new
// leader among the other two.
func TestRaftOverQUICStreamLayer(t *testing.T) {
	key, err := mesh.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	sec, err := mesh.NewSecurity(key)
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(slTestWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	const shard = 5
	ids := []mesh.NodeID{"r1", "r2", "r3"}
	trs := map[mesh.NodeID]*mesh.QUICTransport{}
	for _, id := range ids {
		creds, err := sec.Node(id)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := mesh.NewQUICTransport(mesh.DefaultTransportConfig("127.0.0.1:0"), creds, logger)
		if err != nil {
			t.Fatal(err)
		}
		trs[id] = tr
		t.Cleanup(func() { tr.Close() })
	}
	resolve := func(id mesh.NodeID) (string, error) {
		if tr, ok := trs[id]; ok {
			return tr.Addr(), nil
		}
		return "", mesh.ErrNoRoute
	}
	var servers []raft.Server
	for _, id := range ids {
		servers = append(servers, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(id)})
	}
	rafts := map[mesh.NodeID]*raft.Raft{}
	for _, id := range ids {
		layer, err := NewStreamLayer(trs[id], shard, resolve)
		if err != nil {
			t.Fatal(err)
		}
		nt := raft.NewNetworkTransport(layer, 3, 2*time.Second, io.Discard)
		conf := raft.DefaultConfig()
		conf.LocalID = raft.ServerID(id)
		conf.HeartbeatTimeout = 300 * time.Millisecond
		conf.ElectionTimeout = 300 * time.Millisecond
		conf.LeaderLeaseTimeout = 150 * time.Millisecond
		conf.CommitTimeout = 20 * time.Millisecond
		conf.LogOutput = io.Discard
		store := raft.NewInmemStore()
		r, err := raft.NewRaft(conf, &countFSM{}, store, store, raft.NewInmemSnapshotStore(), nt)
		if err != nil {
			t.Fatal(err)
		}
		if id == ids[0] {
			if err := r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
				t.Fatal(err)
			}
		}
		rafts[id] = r
		t.Cleanup(func() { r.Shutdown().Error(); nt.Close() })
	}

	leader := waitLeader(t, rafts, "")
	if err := rafts[leader].Apply([]byte("x"), 5*time.Second).Error(); err != nil {
		t.Fatalf("apply on %s: %v", leader, err)
	}
	for _, id := range ids {
		if err := waitApplied(rafts[id], 2); err != nil { // the bootstrap config entry, then ours
			t.Fatalf("%s: %v", id, err)
		}
	}
	start := time.Now()
	trs[leader].Close()
	survivors := map[mesh.NodeID]*raft.Raft{}
	for id, r := range rafts {
		if id != leader {
			survivors[id] = r
		}
	}
	next := waitLeader(t, survivors, leader)
	t.Logf("leader %s closed its transport; %s elected after %s", leader, next, time.Since(start))
	if err := rafts[next].Apply([]byte("y"), 5*time.Second).Error(); err != nil {
		t.Fatalf("apply on new leader %s: %v", next, err)
	}
}

// waitLeader waits for one of rafts, other than not, to be leader.
func waitLeader(t *testing.T, rafts map[mesh.NodeID]*raft.Raft, not mesh.NodeID) mesh.NodeID {
	t.Helper()
	var leader mesh.NodeID
	wait.For(t, 20*time.Second, "a leader", func() bool {
		for id, r := range rafts {
			if id != not && r.State() == raft.Leader {
				leader = id
				return true
			}
		}
		return false
	})
	return leader
}

func waitApplied(r *raft.Raft, index uint64) error {
	return wait.Until(context.Background(), 10*time.Second, fmt.Sprintf("applied index %d", index), func() bool { return r.AppliedIndex() >= index })
}
