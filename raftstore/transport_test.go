package raftstore

import (
	"errors"
	"log/slog"
	"testing"

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
