package raftstore

import (
	"log/slog"
	"sync"
	"sync/atomic"
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
	return &GuardedTransport{layer: layer, rpcs: make(chan raft.RPC), done: make(chan struct{}), NetworkTransport: raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
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

// GuardedTransport is raft's NetworkTransport with two guards on its
// heartbeat fast path, which NetworkTransport runs on its own connection
// goroutines rather than raft's main loop:
//
//   - a heartbeat may run there only when it cannot change the replica's
//     term or role: the replica is a follower and the heartbeat carries its
//     current term ([GuardedTransport.GuardHeartbeats]). Any other
//     heartbeat goes to raft's main loop like every other RPC. On the fast
//     path, a heartbeat from a newer leader raised the term of a replica
//     that still ran as leader, concurrently with raft's main loop, and the
//     leader loop then appended its own client entry under the new leader's
//     term; the new leader's entry at that index carried the same term, so
//     the replica kept its own as a duplicate, applied it, and the replicas
//     diverged (hashicorp/raft#695, open in v1.7.2; docs/reliability.md bug
//     24: a SIGSTOPped leader resuming with pushes and the new leader's
//     heartbeats queued).
//   - [GuardedTransport.Quiesce] waits out a heartbeat still running there
//     before the stores close: raft.Shutdown does not wait for those
//     goroutines, and a heartbeat in flight then wrote the current term to
//     a closed stable store and raft panicked ("failed to save current
//     term: database not open"), taking the node down during a rolling
//     restart.
type GuardedTransport struct {
	*raft.NetworkTransport
	layer *StreamLayer

	// mu is held for reading while a heartbeat handler runs; Quiesce takes
	// it for writing to wait the running ones out.
	mu sync.RWMutex

	// state is the replica the heartbeat guard reads (nil until
	// GuardHeartbeats: every heartbeat takes the main loop).
	state atomic.Pointer[TermState]
	// rpcs is the channel raft consumes (Consumer): NetworkTransport's
	// RPCs and the heartbeats the guard sends to the main loop.
	rpcs    chan raft.RPC
	forward sync.Once
	// done is closed by Close or Quiesce (stop): forwarding ends and
	// heartbeats are dropped unanswered.
	done     chan struct{}
	stopOnce sync.Once
}

// TermState is what the heartbeat guard reads of a replica; *raft.Raft
// has both methods (atomic reads).
type TermState interface {
	CurrentTerm() uint64
	State() raft.RaftState
}

// GuardHeartbeats lets heartbeats that cannot change r's term or role take
// NetworkTransport's fast path (raft.NewRaft installs the handler; call
// this right after it). Until then every heartbeat takes raft's main loop.
func (g *GuardedTransport) GuardHeartbeats(r TermState) { g.state.Store(&r) }

// fastPathSafe reports whether rpc, a heartbeat, may run off raft's main
// loop: the replica is a follower and the heartbeat's term is its current
// term. The term only grows, so a heartbeat judged safe that meets a newer
// term is ignored as older; one that would raise the term or end a
// candidacy or leadership runs on the main loop, serialised with the
// leader loop's appends.
func (g *GuardedTransport) fastPathSafe(rpc raft.RPC) bool {
	p := g.state.Load()
	req, ok := rpc.Command.(*raft.AppendEntriesRequest)
	if p == nil || !ok {
		return false
	}
	r := *p
	return r.State() == raft.Follower && req.Term == r.CurrentTerm()
}

// Consumer is the channel raft's main loop reads its RPCs from:
// NetworkTransport's, forwarded, and the heartbeats the guard sends there.
func (g *GuardedTransport) Consumer() <-chan raft.RPC {
	g.forward.Do(func() {
		in := g.NetworkTransport.Consumer()
		go func() {
			for {
				select {
				case rpc := <-in:
					select {
					case g.rpcs <- rpc:
					case <-g.done:
						return
					}
				case <-g.done:
					return
				}
			}
		}()
	})
	return g.rpcs
}

// Close stops forwarding RPCs to raft and closes NetworkTransport.
func (g *GuardedTransport) Close() error {
	g.stop()
	return g.NetworkTransport.Close()
}

func (g *GuardedTransport) stop() { g.stopOnce.Do(func() { close(g.done) }) }

func (g *GuardedTransport) stopped() bool {
	select {
	case <-g.done:
		return true
	default:
		return false
	}
}

// SetHeartbeatHandler wraps cb so that only heartbeats the guard judges
// safe run it on NetworkTransport's goroutine (the rest go to raft's main
// loop), and so that [GuardedTransport.Quiesce] can wait for it and drop
// later calls.
func (g *GuardedTransport) SetHeartbeatHandler(cb func(raft.RPC)) {
	if cb == nil {
		g.NetworkTransport.SetHeartbeatHandler(nil)
		return
	}
	g.NetworkTransport.SetHeartbeatHandler(func(rpc raft.RPC) {
		g.mu.RLock()
		defer g.mu.RUnlock()
		// NetworkTransport waits for the answer on rpc's channel whichever
		// loop gives it. Stopped (closed or quiesced), none is given, as by raft's own
		// handler after Shutdown: NetworkTransport's shutdown (raft.Shutdown
		// closes it before the replica quiesces) ends the wait and drops the
		// connection, which the peer sees as an orderly end; an error
		// answer would be logged by the peer's raft at ERROR.
		if g.stopped() {
			return
		}
		if !g.fastPathSafe(rpc) {
			select {
			case g.rpcs <- rpc:
			case <-g.done:
			}
			return
		}
		cb(rpc)
	})
}

// SetAllow restricts which peers may open raft streams (StreamLayer.SetAllow).
func (g *GuardedTransport) SetAllow(allow func(mesh.NodeID) bool) { g.layer.SetAllow(allow) }

// Refused counts raft streams refused by the allow rule.
func (g *GuardedTransport) Refused() uint64 { return g.layer.Refused() }

// Quiesce returns once no heartbeat handler runs, and drops later ones
// unanswered (see SetHeartbeatHandler); a heartbeat waiting for raft's
// main loop gives up (as after Close).
func (g *GuardedTransport) Quiesce() {
	g.stop()
	g.mu.Lock() // waits out the handlers that began before stop
	g.mu.Unlock()
}
