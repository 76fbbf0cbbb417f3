package raftstore

import (
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"dsspmesh/mesh"
)

// The mesh's raft transport must never pipeline: raft v1.7.2's pipeline
// deadlocks after a follower rejects an append (see NewMeshTransport).
func TestMeshRaftTransportDoesNotPipeline(t *testing.T) {
	tr, err := mesh.NewInmemNetwork().NewTransport("a", "a", mesh.DefaultFrameLimits())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	rt, err := NewMeshTransport(tr, 1, func(id mesh.NodeID) (string, error) { return string(id), nil }, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if _, err := rt.AppendEntriesPipeline("b", "b"); !errors.Is(err, raft.ErrPipelineReplicationNotSupported) {
		t.Fatalf("AppendEntriesPipeline: %v, want ErrPipelineReplicationNotSupported", err)
	}
}

type fakeTerm struct {
	term  atomic.Uint64
	state atomic.Uint32
}

func (f *fakeTerm) CurrentTerm() uint64   { return f.term.Load() }
func (f *fakeTerm) State() raft.RaftState { return raft.RaftState(f.state.Load()) }

// A heartbeat runs on NetworkTransport's fast path only when it cannot
// change the replica's term or role (a follower, the heartbeat at its
// term); every other one reaches raft's main loop (Consumer), where it is
// serialised with the leader loop's appends (hashicorp/raft#695,
// docs/reliability.md bug 24).
func TestHeartbeatFastPathOnlyAtTheFollowersTerm(t *testing.T) {
	net := mesh.NewInmemNetwork()
	resolve := func(id mesh.NodeID) (string, error) { return string(id), nil }
	var rts []*GuardedTransport
	for _, id := range []mesh.NodeID{"a", "b"} {
		tr, err := net.NewTransport(id, string(id), mesh.DefaultFrameLimits())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		rt, err := NewMeshTransport(tr, 1, resolve, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.Close() })
		rts = append(rts, rt)
	}
	a, b := rts[0], rts[1]
	fast := make(chan uint64, 1)
	b.SetHeartbeatHandler(func(rpc raft.RPC) {
		fast <- rpc.Command.(*raft.AppendEntriesRequest).Term
		rpc.Respond(&raft.AppendEntriesResponse{Success: true}, nil)
	})
	main := b.Consumer()
	var replica fakeTerm
	send := func(term uint64) error { // a heartbeat from a to b
		req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("a"), Addr: []byte("a")}, Term: term}
		return a.AppendEntries("b", "b", req, &raft.AppendEntriesResponse{})
	}
	heartbeat := func(term uint64) (path string) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- send(term) }()
		select {
		case got := <-fast:
			path = "fast"
			if got != term {
				t.Fatalf("fast path got term %d, want %d", got, term)
			}
		case rpc := <-main:
			path = "main"
			rpc.Respond(&raft.AppendEntriesResponse{Success: true}, nil)
		case <-time.After(10 * time.Second):
			t.Fatalf("heartbeat of term %d reached neither path", term)
		}
		if err := <-done; err != nil {
			t.Fatalf("heartbeat of term %d: %v", term, err)
		}
		return path
	}
	if p := heartbeat(5); p != "main" {
		t.Fatalf("before GuardHeartbeats a heartbeat took the %s path, want main", p)
	}
	b.GuardHeartbeats(&replica)
	for _, c := range []struct {
		state raft.RaftState
		term  uint64
		hb    uint64
		want  string
	}{
		{raft.Follower, 5, 5, "fast"},
		{raft.Follower, 4, 5, "main"},  // raises the term
		{raft.Follower, 6, 5, "main"},  // older: the main loop answers with the newer term
		{raft.Leader, 4, 5, "main"},    // a stale leader: its loop appends under its own term
		{raft.Candidate, 5, 5, "main"}, // ends the candidacy
	} {
		replica.state.Store(uint32(c.state))
		replica.term.Store(c.term)
		if p := heartbeat(c.hb); p != c.want {
			t.Errorf("%v at term %d, heartbeat of term %d: %s path, want %s", c.state, c.term, c.hb, p, c.want)
		}
	}
	// Shut down as a replica does (raft.Shutdown closes the transport,
	// then the replica quiesces it): a heartbeat on the open connection
	// gets no answer, only the connection's end, which the sender's raft
	// logs at debug; an error answer it would log at ERROR.
	b.Close()
	b.Quiesce()
	err := send(5)
	if err == nil || strings.Contains(err.Error(), "shutting down") {
		t.Fatalf("a heartbeat to a quiesced replica: %v, want the connection's end and no answer", err)
	}
	select {
	case <-fast:
		t.Fatal("a quiesced replica ran a heartbeat")
	default:
	}
}
