package mesh

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"
)

// StreamKind says what a stream carries.
type StreamKind uint8

const (
	// KindRPC streams carry frames: requests and replies, long-lived and
	// reused (a worker keeps one push stream per shard leader).
	KindRPC StreamKind = 1
	// KindRaft streams carry raw bytes of one shard's raft group; they are
	// handed to hashicorp/raft as a net.Conn.
	KindRaft StreamKind = 2
)

func (k StreamKind) String() string {
	switch k {
	case KindRPC:
		return "rpc"
	case KindRaft:
		return "raft"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Channel addresses a stream on a node: its kind and the shard it serves.
// RPC users that do not route by shard use shard 0.
type Channel struct {
	Kind  StreamKind
	Shard uint32
}

func (c Channel) String() string { return fmt.Sprintf("%s/%d", c.Kind, c.Shard) }

// Stream preamble, the first bytes the dialler writes on every stream:
//
//	0  u8   preambleVersion
//	1  u8   StreamKind
//	2  u16  reserved, zero
//	4  u32  shard id, big-endian
const (
	preambleSize    = 8
	preambleVersion = 1
)

func encodePreamble(c Channel) [preambleSize]byte {
	var b [preambleSize]byte
	b[0] = preambleVersion
	b[1] = byte(c.Kind)
	binary.BigEndian.PutUint32(b[4:], c.Shard)
	return b
}

func decodePreamble(b []byte) (Channel, error) {
	if len(b) != preambleSize {
		return Channel{}, fmt.Errorf("%w: %d bytes, want %d", ErrBadPreamble, len(b), preambleSize)
	}
	if b[0] != preambleVersion {
		return Channel{}, fmt.Errorf("%w: version %d, want %d", ErrBadPreamble, b[0], preambleVersion)
	}
	k := StreamKind(b[1])
	if k != KindRPC && k != KindRaft {
		return Channel{}, fmt.Errorf("%w: unknown kind %d", ErrBadPreamble, b[1])
	}
	if b[2] != 0 || b[3] != 0 {
		return Channel{}, fmt.Errorf("%w: reserved bytes not zero", ErrBadPreamble)
	}
	return Channel{Kind: k, Shard: binary.BigEndian.Uint32(b[4:])}, nil
}

// Transport opens authenticated streams between mesh nodes.
type Transport interface {
	// LocalID is this node's id.
	LocalID() NodeID
	// Addr is the address peers dial (the QUICAddr of Meta).
	Addr() string
	// Dial opens a stream on ch to peer at addr. The connection to peer is
	// reused when one is open and re-established when it broke. It fails
	// with ErrPeerIdentity if whoever answers at addr is not peer.
	Dial(ctx context.Context, peer NodeID, addr string, ch Channel) (Stream, error)
	// Listen registers the one listener for ch; streams that arrive for a
	// channel nobody listens on are refused and counted.
	Listen(ch Channel) (Listener, error)
	// Stats returns a snapshot of the counters.
	Stats() Stats
	// Close closes every connection, listener and stream. Idempotent.
	Close() error
}

// Listener yields the streams peers open on one channel.
type Listener interface {
	// Accept blocks until a stream arrives, ctx ends (ctx.Err()) or the
	// listener closes (ErrClosed).
	Accept(ctx context.Context) (Stream, error)
	Channel() Channel
	// Close unregisters the listener; streams already accepted stay open.
	Close() error
}

// Stream is one bidirectional stream to an authenticated peer. It is a
// net.Conn for raw use (raft), or carries frames through SendFrame and
// RecvFrame; one stream must not mix both. One goroutine may send while
// another receives. Close ends both directions; deadlines work as in net.Conn.
type Stream interface {
	net.Conn
	// Peer is the authenticated id of the node at the other end.
	Peer() NodeID
	Channel() Channel
	// SendFrame writes one frame: header encoded with msgpack, payload
	// as is (not retained).
	SendFrame(header any, payload []byte) error
	// RecvFrame reads one frame, decodes its header into header (a pointer)
	// and returns the payload, which the caller owns. A malformed frame
	// closes the stream, is counted in Stats.FrameErrors and returns a
	// *FrameError.
	RecvFrame(header any) ([]byte, error)
	// RecvFrameTo is RecvFrame handing the payload to take, once header
	// is decoded, as its length n and a reader of exactly those bytes,
	// instead of returning it in new memory: a receiver that decodes a
	// payload as it arrives holds no buffer of the frame's size. What take
	// leaves unread is discarded. A read error of the payload (a
	// truncation is a *FrameError, as in RecvFrame) wins over take's own
	// error, which is returned as is.
	RecvFrameTo(header any, take func(n int, r io.Reader) error) error
	// SetMaxPayload lowers the largest payload RecvFrame accepts on this
	// stream below the transport's FrameLimits.MaxPayload (n ≤ 0 or above
	// it: the transport's limit), so a service that knows its frames'
	// size (a shard: 4 bytes per parameter) refuses a larger one before
	// reading it. Call it before RecvFrame, from the receiving goroutine.
	SetMaxPayload(n int)
}

// Stats counts transport events since start.
type Stats struct {
	FrameErrors     uint64 // frames refused: bad lengths, bad msgpack, truncation
	PreambleErrors  uint64 // streams refused for a bad or slow preamble
	UnroutedStreams uint64 // streams for a channel nobody listens on
	DialFailures    uint64 // dials that failed: unreachable, TLS or identity check
	Dials           uint64 // new connections dialled
	StreamsOpened   uint64
	StreamsAccepted uint64
	ConnsRefused    uint64 // a peer's oldest connections closed beyond MaxConnsPerPeer
}

type counters struct {
	frameErrors, preambleErrors, unrouted, dialFailures, dials, opened, accepted, connsRefused atomic.Uint64
}

func (c *counters) snapshot() Stats {
	return Stats{
		FrameErrors:     c.frameErrors.Load(),
		PreambleErrors:  c.preambleErrors.Load(),
		UnroutedStreams: c.unrouted.Load(),
		DialFailures:    c.dialFailures.Load(),
		Dials:           c.dials.Load(),
		StreamsOpened:   c.opened.Load(),
		StreamsAccepted: c.accepted.Load(),
		ConnsRefused:    c.connsRefused.Load(),
	}
}

// TransportConfig tunes the QUIC transport.
type TransportConfig struct {
	// ListenAddr is the UDP address to bind, e.g. "127.0.0.1:0"; the one
	// socket is used for listening and dialling.
	ListenAddr string
	// HandshakeTimeout bounds the QUIC/TLS handshake and the wait for a
	// stream's preamble. Default 3s.
	HandshakeTimeout time.Duration
	// IdleTimeout closes a connection with no traffic; keep-alives are sent
	// at a quarter of it, so only a dead (or paused) peer hits it. It is
	// the budget for noticing a killed peer whose process cannot say so:
	// its streams — a worker's at its shard leader, which the leader's
	// suspicion of a dead worker waits for (shard/suspect.go) — end when it
	// expires. A restarted peer resets its old connections at once
	// (stateless reset). Default 3s: four keep-alives must go unanswered.
	IdleTimeout time.Duration
	// MaxStreamsPerPeer bounds concurrent streams a peer may open on one
	// connection. Default 1024.
	MaxStreamsPerPeer int
	// MaxConnsPerPeer bounds the connections one authenticated peer may
	// hold to this node at once (a node needs one; reconnects overlap old
	// ones until they time out): when a new one arrives beyond it, the
	// peer's oldest are closed and counted in Stats.ConnsRefused. Default 16.
	MaxConnsPerPeer int
	// AcceptBacklog is how many accepted streams a listener queues before
	// new ones are refused. Default 128.
	AcceptBacklog int
	// StreamWindow and ConnWindow are QUIC's maximum flow-control windows.
	// Defaults 16 MiB and 64 MiB: a 1 MiB push must not stall on them.
	StreamWindow uint64
	ConnWindow   uint64
	Frames       FrameLimits
}

// DefaultTransportConfig returns the defaults, listening on addr.
func DefaultTransportConfig(addr string) TransportConfig {
	return TransportConfig{
		ListenAddr:        addr,
		HandshakeTimeout:  3 * time.Second,
		IdleTimeout:       3 * time.Second,
		MaxStreamsPerPeer: 1024,
		MaxConnsPerPeer:   16,
		AcceptBacklog:     128,
		StreamWindow:      16 << 20,
		ConnWindow:        64 << 20,
		Frames:            DefaultFrameLimits(),
	}
}

// Validate reports the first bad value.
func (c TransportConfig) Validate() error {
	if _, err := net.ResolveUDPAddr("udp", c.ListenAddr); err != nil {
		return fmt.Errorf("mesh: TransportConfig.ListenAddr %q: %v", c.ListenAddr, err)
	}
	if c.HandshakeTimeout <= 0 {
		return fmt.Errorf("mesh: TransportConfig.HandshakeTimeout %s must be positive", c.HandshakeTimeout)
	}
	if c.IdleTimeout < c.HandshakeTimeout {
		return fmt.Errorf("mesh: TransportConfig.IdleTimeout %s must be at least HandshakeTimeout %s", c.IdleTimeout, c.HandshakeTimeout)
	}
	if c.MaxStreamsPerPeer < 1 || c.MaxStreamsPerPeer > 1<<20 {
		return fmt.Errorf("mesh: TransportConfig.MaxStreamsPerPeer %d must be in [1, 1048576]", c.MaxStreamsPerPeer)
	}
	if c.MaxConnsPerPeer < 1 || c.MaxConnsPerPeer > 1024 {
		return fmt.Errorf("mesh: TransportConfig.MaxConnsPerPeer %d must be in [1, 1024]", c.MaxConnsPerPeer)
	}
	if c.AcceptBacklog < 1 {
		return fmt.Errorf("mesh: TransportConfig.AcceptBacklog %d must be positive", c.AcceptBacklog)
	}
	if c.StreamWindow < 64<<10 || c.ConnWindow < c.StreamWindow {
		return fmt.Errorf("mesh: TransportConfig windows (stream %d, conn %d) must be ≥ 64 KiB and conn ≥ stream", c.StreamWindow, c.ConnWindow)
	}
	return c.Frames.Validate()
}
