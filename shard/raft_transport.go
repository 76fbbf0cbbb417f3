package shard

import (
	"errors"
	"sync"

	"github.com/hashicorp/raft"
)

// guardedTransport lets Shutdown wait out raft's heartbeat fast path before
// the stores close. raft's NetworkTransport runs that handler on its own
// connection goroutines, which raft.Shutdown does not wait for; a heartbeat
// still in flight then writes the current term to a closed stable store,
// and raft panics ("failed to save current term: database not open"),
// taking the node down during a rolling restart.
type guardedTransport struct {
	*raft.NetworkTransport

	mu     sync.RWMutex
	closed bool
}

var errTransportQuiesced = errors.New("shard: replica shutting down")

func (g *guardedTransport) SetHeartbeatHandler(cb func(raft.RPC)) {
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

// quiesce returns once no heartbeat handler runs, and refuses later ones.
func (g *guardedTransport) quiesce() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}
