package mesh

import (
	"context"
	"fmt"
)

// dialSelf opens a stream on ch to this node's own listener without QUIC:
// two in-memory pipes, as the in-memory transport's streams are. A worker
// pushes to the shard its own node leads this way (one shard in four on a
// 4-node mesh), and nothing of that push crosses a socket: no packets, no
// AEAD, no syscalls. There is no peer to authenticate; the far end's Peer
// is this node. A channel nobody here listens on fails at once with
// ErrUnknownChannel.
func (t *QUICTransport) dialSelf(ctx context.Context, ch Channel) (Stream, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	local, far := newPipePair(t.self, t.self, ch)
	release := func() {
		t.mu.Lock()
		delete(t.loops, local)
		t.mu.Unlock()
	}
	local.release, far.release = release, release
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, ErrClosed
	}
	t.loops[local] = struct{}{}
	t.mu.Unlock()
	if !t.lis.deliver(far) {
		t.cnt.unrouted.Add(1)
		local.Close()
		return nil, fmt.Errorf("%w: %s on %s (this node)", ErrUnknownChannel, ch, t.LocalID())
	}
	t.cnt.opened.Add(1)
	t.cnt.accepted.Add(1)
	return local, nil
}

// closeLoops closes every stream dialSelf opened; called once by Close.
func (t *QUICTransport) closeLoops() {
	t.mu.Lock()
	loops := t.loops
	t.loops = nil
	t.mu.Unlock()
	for s := range loops {
		s.Close()
	}
}
