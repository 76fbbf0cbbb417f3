package raftstore

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"dsspmesh/mesh"
)

// NewMeshTransport builds raft's transport for one shard over the mesh's
// Raft streams (a [StreamLayer]). Hand it to raft.NewRaft, and call
// [GuardedTransport.Quiesce] after raft.Shutdown and before closing the
// [Stores].
func NewMeshTransport(tr mesh.Transport, shard uint32, resolve mesh.Resolver, logger *slog.Logger) (*GuardedTransport, error) {
	return NewMeshTransportTimeout(tr, shard, resolve, logger, DefaultRPCTimeout)
}

// DefaultRPCTimeout bounds one raft RPC (an AppendEntries with its
// entries and the reply; raft scales an InstallSnapshot's by its size).
const DefaultRPCTimeout = 10 * time.Second

// NewMeshTransportTimeout is NewMeshTransport with raft RPCs bounded by
// timeout instead of DefaultRPCTimeout (a shard of large entries).
func NewMeshTransportTimeout(tr mesh.Transport, shard uint32, resolve mesh.Resolver, logger *slog.Logger, timeout time.Duration) (*GuardedTransport, error) {
	layer, err := NewStreamLayer(tr, shard, resolve)
	if err != nil {
		return nil, err
	}
	return &GuardedTransport{layer: layer, NetworkTransport: raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  layer,
		MaxPool: 3,
		Timeout: timeout,
		// Pipelined replication can deadlock in raft v1.7.2: when a
		// follower answers Success=false the pipeline's decoder exits,
		// the sender parks on one more AppendEntries and the pipeline
		// is never closed, so that follower gets no entry again and
		// Shutdown waits forever (a graceful leave then hangs). One RPC
		// in flight takes raft's synchronous path, which has no such
		// hand-off; entries are still batched per RPC.
		MaxRPCsInFlight: 1,
		Logger:          HCLogger(logger.With("shard", shard), "raft-net"),
	})}, nil
}

// GuardedTransport is raft's NetworkTransport with a way to wait out its
// heartbeat fast path before the stores close. NetworkTransport runs that
// handler on its own connection goroutines, which raft.Shutdown does not
// wait for; a heartbeat still in flight then writes the current term to a
// closed stable store, and raft panics ("failed to save current term:
// database not open"), taking the node down during a rolling restart.
type GuardedTransport struct {
	*raft.NetworkTransport
	layer *StreamLayer

	mu     sync.RWMutex
	closed bool
}

var errTransportQuiesced = errors.New("raftstore: replica shutting down")

// SetHeartbeatHandler wraps cb so that [GuardedTransport.Quiesce] can wait
// for it and refuse later calls.
func (g *GuardedTransport) SetHeartbeatHandler(cb func(raft.RPC)) {
	if cb == nil {
		g.NetworkTransport.SetHeartbeatHandler(nil)
		return
	}
	g.NetworkTransport.SetHeartbeatHandler(func(rpc raft.RPC) {
		g.mu.RLock()
		defer g.mu.RUnlock()
		if g.closed {
			rpc.Respond(nil, errTransportQuiesced)
			return
		}
		cb(rpc)
	})
}

// SetAllow restricts which peers may open raft streams (StreamLayer.SetAllow).
func (g *GuardedTransport) SetAllow(allow func(mesh.NodeID) bool) { g.layer.SetAllow(allow) }

// Refused counts raft streams refused by the allow rule.
func (g *GuardedTransport) Refused() uint64 { return g.layer.Refused() }

// Quiesce returns once no heartbeat handler runs, and refuses later ones.
func (g *GuardedTransport) Quiesce() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}
