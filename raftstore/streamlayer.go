package raftstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"dsspmesh/mesh"
)

// StreamLayer is a raft.StreamLayer for one shard's raft group over the mesh
// transport: raft server addresses are node ids, each Dial opens a
// mesh.KindRaft stream for the shard (authenticated like every mesh stream:
// the node answering must hold a certificate for the id dialled), and Accept
// yields the streams peers open for that shard. Build raft's transport with
// raft.NewNetworkTransport(layer, ...). Accept, Dial, Close and Addr are safe
// for concurrent use; Accept blocks until a stream arrives and returns an
// error wrapping net.ErrClosed once the layer is closed, which is how raft's
// NetworkTransport knows to stop. Closing the layer leaves the mesh transport
// and streams already accepted open.
type StreamLayer struct {
	tr      mesh.Transport
	ch      mesh.Channel
	ln      mesh.Listener
	resolve mesh.Resolver
	ctx     context.Context
	cancel  context.CancelFunc
	allow   atomic.Pointer[func(mesh.NodeID) bool]
	refused atomic.Uint64
}

// SetAllow makes Accept close, uncounted by raft, every stream whose
// authenticated peer allow refuses: raft traffic only from the members of
// the shard's configuration (the replica supplies the rule). nil allows
// every peer, as before the first call.
func (l *StreamLayer) SetAllow(allow func(mesh.NodeID) bool) {
	if allow == nil {
		l.allow.Store(nil)
		return
	}
	l.allow.Store(&allow)
}

// Refused counts the streams Accept closed because allow refused their peer.
func (l *StreamLayer) Refused() uint64 { return l.refused.Load() }

// NewStreamLayer listens for shard's raft streams on tr.
func NewStreamLayer(tr mesh.Transport, shard uint32, resolve mesh.Resolver) (*StreamLayer, error) {
	if resolve == nil {
		return nil, errors.New("raftstore: NewStreamLayer needs a resolver")
	}
	ch := mesh.Channel{Kind: mesh.KindRaft, Shard: shard}
	ln, err := tr.Listen(ch)
	if err != nil {
		return nil, fmt.Errorf("raftstore: listen for shard %d: %w", shard, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &StreamLayer{tr: tr, ch: ch, ln: ln, resolve: resolve, ctx: ctx, cancel: cancel}, nil
}

// Accept waits for the next raft stream of this shard from an allowed
// peer (SetAllow); streams from others are closed and counted.
func (l *StreamLayer) Accept() (net.Conn, error) {
	for {
		s, err := l.ln.Accept(l.ctx)
		if err != nil {
			return nil, fmt.Errorf("raftstore: accept on %s: %w (%w)", l.ch, err, net.ErrClosed)
		}
		if allow := l.allow.Load(); allow != nil && !(*allow)(s.Peer()) {
			l.refused.Add(1)
			s.Close()
			continue
		}
		return s, nil
	}
}

// Close stops Accept; the mesh transport stays up.
func (l *StreamLayer) Close() error {
	l.cancel()
	return l.ln.Close()
}

// Addr is this node's raft address: its node id.
func (l *StreamLayer) Addr() net.Addr { return raftAddr(l.tr.LocalID()) }

// Dial opens a raft stream for this shard to the node whose id is address.
func (l *StreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	id := mesh.NodeID(address)
	addr, err := l.resolve(id)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(l.ctx, timeout)
	defer cancel()
	return l.tr.Dial(ctx, id, addr, l.ch)
}

type raftAddr mesh.NodeID

func (a raftAddr) Network() string { return "dssp-mesh" }
func (a raftAddr) String() string  { return string(a) }
