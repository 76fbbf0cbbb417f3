package mesh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
)

// QUICTransport is the Transport over quic-go: one UDP socket for listening
// and dialling, mutual TLS 1.3 from the node's credentials, one cached
// connection per peer carrying many streams.
type QUICTransport struct {
	cfg   TransportConfig
	creds *NodeCredentials
	log   *slog.Logger
	qconf *quic.Config
	udp   *net.UDPConn
	qt    *quic.Transport
	ln    *quic.Listener
	lis   *listenerSet
	cnt   counters

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	peers  map[NodeID]*quic.Conn // the connection Dial reuses, either direction
	all    map[*quic.Conn]NodeID
	byPeer map[NodeID][]*quic.Conn   // each peer's connections, oldest first (MaxConnsPerPeer)
	loops  map[*inmemStream]struct{} // open streams to this node itself, one end each (loopback.go)
	closed bool

	self *pipeEnd // this node's end of its streams to itself

	sil silence // silence.go
}

// NewQUICTransport binds cfg.ListenAddr and starts accepting connections.
func NewQUICTransport(cfg TransportConfig, creds *NodeCredentials, log *slog.Logger) (*QUICTransport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	uaddr, err := net.ResolveUDPAddr("udp", cfg.ListenAddr)
	if err != nil {
		return nil, fmt.Errorf("mesh: listen address %q: %w", cfg.ListenAddr, err)
	}
	udp, err := net.ListenUDP("udp", uaddr)
	if err != nil {
		return nil, fmt.Errorf("mesh: listen %s: %w", cfg.ListenAddr, err)
	}
	t := &QUICTransport{
		cfg:   cfg,
		creds: creds,
		log:   log.With("node", string(creds.ID())),
		qconf: &quic.Config{
			HandshakeIdleTimeout:       cfg.HandshakeTimeout,
			MaxIdleTimeout:             cfg.IdleTimeout,
			KeepAlivePeriod:            cfg.keepAlive(),
			MaxIncomingStreams:         int64(cfg.MaxStreamsPerPeer),
			MaxIncomingUniStreams:      -1,
			MaxStreamReceiveWindow:     cfg.StreamWindow,
			MaxConnectionReceiveWindow: cfg.ConnWindow,
		},
		udp:    udp,
		qt:     &quic.Transport{Conn: udp, StatelessResetKey: creds.statelessResetKey()},
		lis:    newListenerSet(cfg.AcceptBacklog),
		peers:  make(map[NodeID]*quic.Conn),
		all:    make(map[*quic.Conn]NodeID),
		byPeer: make(map[NodeID][]*quic.Conn),
		loops:  make(map[*inmemStream]struct{}),
	}
	t.self = &pipeEnd{id: creds.ID(), addr: udp.LocalAddr().String(), frames: cfg.Frames, cnt: &t.cnt, lend: true}
	t.ln, err = t.qt.Listen(creds.ServerTLS(), t.qconf)
	if err != nil {
		udp.Close()
		return nil, fmt.Errorf("mesh: quic listen: %w", err)
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	t.wg.Add(2)
	go t.acceptConns()
	go t.sampleSilence()
	return t, nil
}

func (t *QUICTransport) LocalID() NodeID { return t.creds.ID() }

func (t *QUICTransport) Addr() string { return t.udp.LocalAddr().String() }

func (t *QUICTransport) Stats() Stats { return t.cnt.snapshot() }

func (t *QUICTransport) Listen(ch Channel) (Listener, error) { return t.lis.listen(ch) }

// Dial opens a stream on ch to peer. A cached connection that turns out to
// be dead is dropped and dialled again once. A stream to this node itself
// stays in memory (dialSelf).
func (t *QUICTransport) Dial(ctx context.Context, peer NodeID, addr string, ch Channel) (Stream, error) {
	if peer == t.LocalID() {
		return t.dialSelf(ctx, ch)
	}
	for attempt := 0; ; attempt++ {
		conn, fresh, err := t.conn(ctx, peer, addr)
		if err != nil {
			return nil, err
		}
		s, err := t.openStream(ctx, conn, peer, ch)
		if err == nil {
			t.cnt.opened.Add(1)
			return s, nil
		}
		// A connection that cannot open a stream and no longer hears its
		// peer is given up: close it, or it lives on (keep-alives) on both
		// sides unused. One that still hears its peer is alive and busy
		// (its streams at the peer's MaxStreamsPerPeer, or ctx too short
		// for a loaded peer): closing it would cut every stream on it — a
		// 25 MB snapshot in flight, the pushes of every shard — for one
		// probe that timed out, and the redial starts them all over.
		if t.hears(conn) {
			return nil, fmt.Errorf("mesh: open %s stream to %s (connection kept: it still hears the peer): %w", ch, peer, err)
		}
		t.forget(peer, conn)
		conn.CloseWithError(codeClosing, "cannot open a stream")
		if fresh || attempt > 0 || ctx.Err() != nil {
			return nil, fmt.Errorf("mesh: open %s stream to %s: %w", ch, peer, err)
		}
	}
}

func (t *QUICTransport) openStream(ctx context.Context, conn *quic.Conn, peer NodeID, ch Channel) (*quicStream, error) {
	qs, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return nil, err
	}
	pre := encodePreamble(ch)
	if dl, ok := ctx.Deadline(); ok {
		qs.SetWriteDeadline(dl)
	}
	if _, err := qs.Write(pre[:]); err != nil {
		qs.CancelRead(codeClosed)
		qs.CancelWrite(codeClosed)
		return nil, err
	}
	qs.SetWriteDeadline(time.Time{})
	return &quicStream{Stream: qs, conn: conn, peer: peer, ch: ch, t: t}, nil
}

// conn returns a live connection to peer, dialling one if needed; fresh
// says it was just dialled.
func (t *QUICTransport) conn(ctx context.Context, peer NodeID, addr string) (*quic.Conn, bool, error) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, false, ErrClosed
	}
	if c := t.peers[peer]; c != nil && c.Context().Err() == nil {
		t.mu.Unlock()
		return c, false, nil
	}
	t.mu.Unlock()

	uaddr, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, false, fmt.Errorf("mesh: peer %s address %q: %w", peer, addr, err)
	}
	t.cnt.dials.Add(1)
	hctx, cancel := context.WithTimeout(ctx, t.cfg.HandshakeTimeout)
	defer cancel()
	c, err := t.qt.Dial(hctx, uaddr, t.creds.ClientTLS(peer), t.qconf)
	if err != nil {
		t.cnt.dialFailures.Add(1)
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w: %w", ErrDialTimeout, err)
		}
		return nil, false, fmt.Errorf("mesh: connect to %s at %s: %w", peer, addr, err)
	}
	if !t.track(c, peer, true) {
		return nil, false, ErrClosed
	}
	go t.serveConn(c, peer)
	return c, true, nil
}

// track records c and counts the goroutine that will serve it; prefer makes
// c the connection Dial reuses for peer.
func (t *QUICTransport) track(c *quic.Conn, peer NodeID, prefer bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		c.CloseWithError(codeClosing, closeMessage)
		return false
	}
	t.wg.Add(1)
	if _, ok := t.all[c]; !ok {
		t.byPeer[peer] = append(t.byPeer[peer], c)
	}
	t.all[c] = peer
	if old := t.peers[peer]; prefer || old == nil || old.Context().Err() != nil {
		t.peers[peer] = c
	}
	return true
}

func (t *QUICTransport) forget(peer NodeID, c *quic.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.peers[peer] == c {
		delete(t.peers, peer)
	}
	if _, ok := t.all[c]; ok {
		delete(t.all, c)
		cs := slices.DeleteFunc(t.byPeer[peer], func(x *quic.Conn) bool { return x == c })
		if len(cs) == 0 {
			delete(t.byPeer, peer)
		} else {
			t.byPeer[peer] = cs
		}
	}
}

// SetPeerCheck installs the node's verdict on peers for every later
// handshake ([NodeCredentials.SetPeerCheck]).
func (t *QUICTransport) SetPeerCheck(f PeerCheck) { t.creds.SetPeerCheck(f) }

// ClosePeer closes every connection to or from peer (a revoked node): its
// streams end, and a new connection must pass the handshake's checks again.
func (t *QUICTransport) ClosePeer(peer NodeID, reason string) {
	t.mu.Lock()
	cs := slices.Clone(t.byPeer[peer])
	t.mu.Unlock()
	for _, c := range cs {
		c.CloseWithError(codeClosing, reason)
	}
}

func (t *QUICTransport) acceptConns() {
	defer t.wg.Done()
	for {
		c, err := t.ln.Accept(t.ctx)
		if err != nil {
			return
		}
		// The TLS layer already verified the chain; the certificate's id is
		// the peer's identity.
		peer, err := peerID(c.ConnectionState().TLS)
		if err != nil {
			t.cnt.dialFailures.Add(1)
			c.CloseWithError(codeClosing, "bad identity")
			continue
		}
		if !t.track(c, peer, false) {
			return
		}
		t.capConns(peer)
		go t.serveConn(c, peer)
	}
}

// capConns closes peer's oldest connections beyond MaxConnsPerPeer. The
// newest is the one the peer just chose to use; an old one is most likely
// a connection it gave up on that is still alive on our side.
func (t *QUICTransport) capConns(peer NodeID) {
	t.mu.Lock()
	cs := t.byPeer[peer]
	var old []*quic.Conn
	if n := len(cs) - t.cfg.MaxConnsPerPeer; n > 0 {
		old = slices.Clone(cs[:n])
	}
	t.mu.Unlock()
	for _, c := range old {
		t.cnt.connsRefused.Add(1)
		t.log.Warn("closing a peer's oldest connection: too many from it", "peer", string(peer), "limit", t.cfg.MaxConnsPerPeer)
		c.CloseWithError(codeClosing, "too many connections from this peer")
	}
}

// serveConn accepts the streams peer opens on c until c ends.
func (t *QUICTransport) serveConn(c *quic.Conn, peer NodeID) {
	defer t.wg.Done()
	defer t.forget(peer, c)
	for {
		qs, err := c.AcceptStream(t.ctx)
		if err != nil {
			return
		}
		t.wg.Add(1)
		go t.routeStream(c, peer, qs)
	}
}

// routeStream reads the preamble within the handshake timeout and hands the
// stream to its channel's listener.
func (t *QUICTransport) routeStream(c *quic.Conn, peer NodeID, qs *quic.Stream) {
	defer t.wg.Done()
	qs.SetReadDeadline(time.Now().Add(t.cfg.HandshakeTimeout))
	var pre [preambleSize]byte
	_, err := io.ReadFull(qs, pre[:])
	var ch Channel
	if err == nil {
		ch, err = decodePreamble(pre[:])
	}
	if err != nil {
		t.cnt.preambleErrors.Add(1)
		t.log.Debug("refusing stream", "peer", string(peer), "err", err)
		qs.CancelRead(codeBadPreamb)
		qs.CancelWrite(codeBadPreamb)
		return
	}
	qs.SetReadDeadline(time.Time{})
	s := &quicStream{Stream: qs, conn: c, peer: peer, ch: ch, t: t}
	if !t.lis.deliver(s) {
		t.cnt.unrouted.Add(1)
		t.log.Debug("no listener for stream", "peer", string(peer), "channel", ch.String())
		qs.CancelRead(codeNoListener)
		qs.CancelWrite(codeNoListener)
		return
	}
	t.cnt.accepted.Add(1)
}

// Close closes all connections and the socket and waits for the
// transport's goroutines.
func (t *QUICTransport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	conns := t.all
	t.all, t.peers = nil, nil
	t.mu.Unlock()

	t.cancel()
	t.lis.closeAll()
	t.closeLoops()
	for c := range conns {
		c.CloseWithError(codeClosing, closeMessage)
	}
	t.ln.Close()
	err := t.qt.Close()
	t.udp.Close()
	t.wg.Wait()
	return err
}

type quicStream struct {
	*quic.Stream
	conn *quic.Conn
	peer NodeID
	ch   Channel
	t    *QUICTransport
	wbuf []byte
	// maxPayload (SetMaxPayload) is read and written by the receiving
	// goroutine only.
	maxPayload int
}

func (s *quicStream) SetMaxPayload(n int) { s.maxPayload = n }

func (s *quicStream) Peer() NodeID         { return s.peer }
func (s *quicStream) Channel() Channel     { return s.ch }
func (s *quicStream) LocalAddr() net.Addr  { return s.conn.LocalAddr() }
func (s *quicStream) RemoteAddr() net.Addr { return s.conn.RemoteAddr() }

// Close ends both directions; quic-go's Close alone only ends ours.
func (s *quicStream) Close() error {
	s.Stream.CancelRead(codeClosed)
	return s.Stream.Close()
}

func (s *quicStream) SendFrame(header any, payload []byte) error {
	var err error
	s.wbuf, err = appendFramePrefix(s.wbuf[:0], header, len(payload), s.t.cfg.Frames)
	if err != nil {
		return err
	}
	if _, err := s.Stream.Write(s.wbuf); err != nil {
		return err
	}
	if len(payload) > 0 {
		_, err = s.Stream.Write(payload)
	}
	return err
}

func (s *quicStream) RecvFrame(header any) ([]byte, error) {
	p, err := readFrame(s.Stream, header, limitPayload(s.t.cfg.Frames, s.maxPayload))
	return p, s.frameErr(err)
}

func (s *quicStream) RecvFrameTo(header any, take func(n int, r io.Reader) error) error {
	return s.frameErr(readFrameTo(s.Stream, header, limitPayload(s.t.cfg.Frames, s.maxPayload), take))
}

// frameErr counts and logs a bad frame and closes the stream; err passes.
func (s *quicStream) frameErr(err error) error {
	if fe, ok := errors.AsType[*FrameError](err); ok {
		fe.Peer = s.peer
		s.t.cnt.frameErrors.Add(1)
		s.t.log.Warn("closing stream after bad frame", "peer", string(s.peer), "channel", s.ch.String(), "err", fe.Reason)
		s.Stream.CancelRead(codeBadFrame)
		s.Stream.CancelWrite(codeBadFrame)
	}
	return err
}
