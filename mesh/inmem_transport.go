package mesh

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Fault is what a FaultHook decides for one frame.
type Fault struct {
	Drop      bool          // the frame never arrives
	Duplicate bool          // the frame arrives twice
	Delay     time.Duration // the frame, and so everything behind it, arrives later
}

// FaultHook is called for every frame sent on an in-memory stream (every
// Write of a raw stream counts as one frame). frame is a private copy the
// hook may change in place to corrupt what arrives.
type FaultHook func(from, to NodeID, ch Channel, frame []byte) Fault

// InmemNetwork connects InmemTransports by address, with injectable faults
// and partitions. Its zero value is not usable; call NewInmemNetwork.
type InmemNetwork struct {
	mu      sync.Mutex
	byAddr  map[string]*InmemTransport
	blocked map[[2]NodeID]bool
	hook    FaultHook
	rtt     map[[2]NodeID]time.Duration // SetRTT's (rtt.go)
}

// NewInmemNetwork returns an empty network.
func NewInmemNetwork() *InmemNetwork {
	return &InmemNetwork{byAddr: make(map[string]*InmemTransport), blocked: make(map[[2]NodeID]bool)}
}

// SetFaults installs hook for all frames from now on (nil removes it).
func (n *InmemNetwork) SetFaults(hook FaultHook) {
	n.mu.Lock()
	n.hook = hook
	n.mu.Unlock()
}

// Partition cuts every node of a off from every node of b, both ways: dials
// fail with ErrNoRoute and frames in flight on open streams are dropped.
func (n *InmemNetwork) Partition(a, b []NodeID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, x := range a {
		for _, y := range b {
			n.blocked[[2]NodeID{x, y}] = true
			n.blocked[[2]NodeID{y, x}] = true
		}
	}
}

// Heal removes every partition.
func (n *InmemNetwork) Heal() {
	n.mu.Lock()
	n.blocked = make(map[[2]NodeID]bool)
	n.mu.Unlock()
}

// verdict decides the fate of one frame from→to.
func (n *InmemNetwork) verdict(from, to NodeID, ch Channel, frame []byte) Fault {
	n.mu.Lock()
	blocked, hook := n.blocked[[2]NodeID{from, to}], n.hook
	n.mu.Unlock()
	if blocked {
		return Fault{Drop: true}
	}
	if hook != nil {
		return hook(from, to, ch, frame)
	}
	return Fault{}
}

// InmemTransport is the in-memory Transport. Unlike QUIC, a Dial to a
// channel nobody listens on fails at once with ErrUnknownChannel.
type InmemTransport struct {
	net *InmemNetwork
	lis *listenerSet
	cnt counters
	end *pipeEnd // its id, address and frame limits

	mu      sync.Mutex
	streams map[*inmemStream]struct{}
	closed  bool

	// check is the node's verdict on peers (SetPeerCheck), asked at every
	// dial on both ends with no key (there are no certificates here).
	check atomic.Pointer[PeerCheck]
}

// SetPeerCheck installs the node's verdict on peers, as
// [NodeCredentials.SetPeerCheck] does on QUIC: a dial between two
// transports fails when either end's check refuses the other's id (it is
// given no key). nil removes it.
func (t *InmemTransport) SetPeerCheck(f PeerCheck) {
	if f == nil {
		t.check.Store(nil)
		return
	}
	t.check.Store(&f)
}

func (t *InmemTransport) refuses(peer NodeID) error {
	if f := t.check.Load(); f != nil {
		return (*f)(peer, nil)
	}
	return nil
}

// ClosePeer closes every open stream with peer.
func (t *InmemTransport) ClosePeer(peer NodeID, reason string) {
	t.mu.Lock()
	var cut []*inmemStream
	for s := range t.streams {
		if s.peer == peer {
			cut = append(cut, s)
		}
	}
	t.mu.Unlock()
	for _, s := range cut {
		s.Close()
	}
}

// NewTransport attaches a transport for id at addr (any unique string).
func (n *InmemNetwork) NewTransport(id NodeID, addr string, frames FrameLimits) (*InmemTransport, error) {
	if err := id.Validate(); err != nil {
		return nil, err
	}
	if err := frames.Validate(); err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.byAddr[addr]; ok {
		return nil, fmt.Errorf("mesh: inmem address %q in use", addr)
	}
	t := &InmemTransport{net: n, lis: newListenerSet(128), streams: make(map[*inmemStream]struct{})}
	t.end = &pipeEnd{id: id, addr: addr, frames: frames, cnt: &t.cnt, verdict: n.verdict}
	n.byAddr[addr] = t
	return t, nil
}

func (t *InmemTransport) LocalID() NodeID                     { return t.end.id }
func (t *InmemTransport) Addr() string                        { return t.end.addr }
func (t *InmemTransport) Stats() Stats                        { return t.cnt.snapshot() }
func (t *InmemTransport) Listen(ch Channel) (Listener, error) { return t.lis.listen(ch) }

func (t *InmemTransport) Dial(ctx context.Context, peer NodeID, addr string, ch Channel) (Stream, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t.net.mu.Lock()
	remote := t.net.byAddr[addr]
	blocked := t.net.blocked[[2]NodeID{t.end.id, peer}]
	t.net.mu.Unlock()
	t.cnt.dials.Add(1)
	switch {
	case remote == nil || blocked:
		t.cnt.dialFailures.Add(1)
		return nil, fmt.Errorf("%w: %s at %q", ErrNoRoute, peer, addr)
	case remote.end.id != peer:
		t.cnt.dialFailures.Add(1)
		return nil, fmt.Errorf("%w: dialled %q but %q answers at %q", ErrPeerIdentity, peer, remote.end.id, addr)
	}
	if err := cmp.Or(t.refuses(peer), remote.refuses(t.end.id)); err != nil {
		t.cnt.dialFailures.Add(1)
		return nil, fmt.Errorf("%w: %v", ErrPeerIdentity, err)
	}
	local, far := newPipePair(t.end, remote.end, ch)
	if !t.add(local) {
		return nil, ErrClosed
	}
	if !remote.add(far) || !remote.lis.deliver(far) {
		remote.cnt.unrouted.Add(1)
		local.Close()
		far.Close()
		return nil, fmt.Errorf("%w: %s on %s", ErrUnknownChannel, ch, peer)
	}
	remote.cnt.accepted.Add(1)
	t.cnt.opened.Add(1)
	return local, nil
}

func (t *InmemTransport) add(s *inmemStream) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.streams[s] = struct{}{}
	return true
}

// Close detaches the transport and closes its streams; peers see EOF.
func (t *InmemTransport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	streams := t.streams
	t.streams = nil
	t.mu.Unlock()
	t.net.mu.Lock()
	if t.net.byAddr[t.end.addr] == t {
		delete(t.net.byAddr, t.end.addr)
	}
	t.net.mu.Unlock()
	t.lis.closeAll()
	for s := range streams {
		s.Close()
	}
	return nil
}

// pipeEnd is what a stream of pipes needs from the transport at one end.
type pipeEnd struct {
	id     NodeID
	addr   string
	frames FrameLimits
	cnt    *counters
	// verdict decides each frame's fate; nil: every frame arrives.
	verdict func(from, to NodeID, ch Channel, frame []byte) Fault
	// lend (only on an end without a verdict: a lent payload bypasses
	// it): SendFrame passes a payload of lendBytes or more to the reader
	// without copying it and returns once the reader has taken it all (as
	// a QUIC stream's Write holds the caller's bytes until they are
	// packed). A node's 6 MB pushes to itself then never exist twice,
	// and a reader that falls behind holds its sender back.
	lend bool
}

// lendBytes is the smallest payload a lending end passes by reference.
const lendBytes = 256 << 10

// inmemStream is one end of a stream made of two pipes: the in-memory
// transport's, and the QUIC transport's streams to its own node.
type inmemStream struct {
	end   *pipeEnd
	other *inmemStream
	peer  NodeID
	ch    Channel
	r, w  *pipe
	// maxPayload (SetMaxPayload) is read and written by the receiving
	// goroutine only.
	maxPayload int
	// release, when set, is called on every Close (it must be idempotent):
	// the QUIC transport forgets its streams to itself.
	release func()
}

// newPipePair returns the two ends of a stream on ch from a to b.
func newPipePair(a, b *pipeEnd, ch Channel) (local, far *inmemStream) {
	ab, ba := newPipe(), newPipe()
	local = &inmemStream{end: a, peer: b.id, ch: ch, r: ba, w: ab}
	far = &inmemStream{end: b, peer: a.id, ch: ch, r: ab, w: ba}
	local.other, far.other = far, local
	return local, far
}

type inmemAddr string

func (a inmemAddr) Network() string { return "inmem" }
func (a inmemAddr) String() string  { return string(a) }

func (s *inmemStream) Peer() NodeID               { return s.peer }
func (s *inmemStream) Channel() Channel           { return s.ch }
func (s *inmemStream) LocalAddr() net.Addr        { return inmemAddr(s.end.addr) }
func (s *inmemStream) RemoteAddr() net.Addr       { return inmemAddr(s.other.end.addr) }
func (s *inmemStream) Read(b []byte) (int, error) { return s.r.read(b) }

func (s *inmemStream) Write(b []byte) (int, error) {
	if err := s.send(append([]byte(nil), b...)); err != nil {
		return 0, err
	}
	return len(b), nil
}

// send passes one frame through the network's faults to the peer.
func (s *inmemStream) send(frame []byte) error {
	var f Fault
	if s.end.verdict != nil {
		f = s.end.verdict(s.end.id, s.peer, s.ch, frame)
	}
	if f.Drop {
		return s.w.writable()
	}
	n := 1
	if f.Duplicate {
		n = 2
	}
	for range n {
		if err := s.w.write(frame, f.Delay); err != nil {
			return err
		}
	}
	return nil
}

func (s *inmemStream) Close() error {
	s.r.close()
	s.w.close()
	if s.release != nil {
		s.release()
	}
	return nil
}

func (s *inmemStream) SetDeadline(d time.Time) error {
	s.r.setDeadline(d)
	return nil
}
func (s *inmemStream) SetReadDeadline(d time.Time) error {
	s.r.setDeadline(d)
	return nil
}

// SetWriteDeadline bounds a lent payload's wait for its reader; other
// writes never block.
func (s *inmemStream) SetWriteDeadline(d time.Time) error {
	s.w.setWriteDeadline(d)
	return nil
}

func (s *inmemStream) SendFrame(header any, payload []byte) error {
	lend := s.end.lend && len(payload) >= lendBytes
	b, err := appendFramePrefix(nil, header, len(payload), s.end.frames)
	if err != nil {
		return err
	}
	if !lend {
		return s.send(append(b, payload...))
	}
	if err := s.w.write(b, 0); err != nil {
		return err
	}
	return s.w.lend(payload)
}

func (s *inmemStream) RecvFrame(header any) ([]byte, error) {
	p, err := readFrame(s, header, limitPayload(s.end.frames, s.maxPayload))
	return p, s.frameErr(err)
}

func (s *inmemStream) RecvFrameTo(header any, take func(n int, r io.Reader) error) error {
	return s.frameErr(readFrameTo(s, header, limitPayload(s.end.frames, s.maxPayload), take))
}

// frameErr counts a bad frame and closes the stream; err passes.
func (s *inmemStream) frameErr(err error) error {
	if fe, ok := errors.AsType[*FrameError](err); ok {
		fe.Peer = s.peer
		s.end.cnt.frameErrors.Add(1)
		s.Close()
	}
	return err
}

func (s *inmemStream) SetMaxPayload(n int) { s.maxPayload = n }

// pipe is one direction of an in-memory stream: an unbounded queue of
// frames, each readable from its arrival time on.
type pipe struct {
	mu        sync.Mutex
	q         []unit
	closed    bool
	deadline  time.Time     // the reader's
	wdeadline time.Time     // a lender's (lend)
	wmoved    chan struct{} // closed and replaced when wdeadline changes
	wake      chan struct{} // closed and replaced on every change
	done      chan struct{} // closed by close
}

type unit struct {
	b  []byte
	at time.Time
	// taken, for a lent unit, is closed once the reader has copied b
	// whole; b is the sender's memory until then.
	taken chan struct{}
}

func newPipe() *pipe {
	return &pipe{wake: make(chan struct{}), done: make(chan struct{}), wmoved: make(chan struct{})}
}

func (p *pipe) changed() {
	close(p.wake)
	p.wake = make(chan struct{})
}

func (p *pipe) writable() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return io.ErrClosedPipe
	}
	return nil
}

func (p *pipe) write(b []byte, delay time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return io.ErrClosedPipe
	}
	at := time.Now().Add(delay)
	if n := len(p.q); n > 0 && p.q[n-1].at.After(at) {
		at = p.q[n-1].at // a stream stays in order
	}
	p.q = append(p.q, unit{b: b, at: at})
	p.changed()
	return nil
}

// lend queues b without copying it and waits until the reader has taken
// it whole. If the pipe closes or the write deadline passes first, the
// part not yet read is withdrawn (the reader copies under p.mu, so b is
// the caller's again on return) and the pipe is closed: the frame is cut.
func (p *pipe) lend(b []byte) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return io.ErrClosedPipe
	}
	at := time.Now()
	if n := len(p.q); n > 0 && p.q[n-1].at.After(at) {
		at = p.q[n-1].at
	}
	taken := make(chan struct{})
	p.q = append(p.q, unit{b: b, at: at, taken: taken})
	p.changed()
	p.mu.Unlock()
	err := p.awaitTaken(taken)
	p.mu.Lock()
	p.q = slices.DeleteFunc(p.q, func(u unit) bool { return u.taken == taken })
	select {
	case <-taken: // the reader took the last of it meanwhile
		err = nil
	default:
	}
	p.mu.Unlock()
	if err != nil {
		p.close()
	}
	return err
}

// awaitTaken waits for taken, the pipe's close or its write deadline,
// which a watcher may move while it waits (to abort the send).
func (p *pipe) awaitTaken(taken chan struct{}) error {
	for {
		p.mu.Lock()
		dl, moved := p.wdeadline, p.wmoved
		p.mu.Unlock()
		var expired <-chan time.Time
		var timer *time.Timer
		if !dl.IsZero() {
			timer = time.NewTimer(time.Until(dl))
			expired = timer.C
		}
		var err error
		select {
		case <-taken:
			return nil
		case <-p.done:
			err = io.ErrClosedPipe
		case <-expired:
			err = os.ErrDeadlineExceeded
		case <-moved:
		}
		if timer != nil {
			timer.Stop()
		}
		if err != nil {
			return err
		}
	}
}

func (p *pipe) setWriteDeadline(d time.Time) {
	p.mu.Lock()
	p.wdeadline = d
	close(p.wmoved)
	p.wmoved = make(chan struct{})
	p.mu.Unlock()
}

func (p *pipe) read(b []byte) (int, error) {
	for {
		p.mu.Lock()
		now := time.Now()
		if len(p.q) > 0 && !p.q[0].at.After(now) {
			n := copy(b, p.q[0].b)
			if p.q[0].b = p.q[0].b[n:]; len(p.q[0].b) == 0 {
				if p.q[0].taken != nil {
					close(p.q[0].taken)
				}
				p.q = p.q[1:]
			}
			p.mu.Unlock()
			return n, nil
		}
		if p.closed && len(p.q) == 0 {
			p.mu.Unlock()
			return 0, io.EOF
		}
		if !p.deadline.IsZero() && !p.deadline.After(now) {
			p.mu.Unlock()
			return 0, os.ErrDeadlineExceeded
		}
		var wait time.Duration = -1
		if len(p.q) > 0 {
			wait = p.q[0].at.Sub(now)
		}
		if !p.deadline.IsZero() && (wait < 0 || p.deadline.Sub(now) < wait) {
			wait = p.deadline.Sub(now)
		}
		wake := p.wake
		p.mu.Unlock()
		if wait < 0 {
			<-wake
			continue
		}
		timer := time.NewTimer(wait)
		select {
		case <-wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// close ends the pipe: queued frames are still read, then EOF.
func (p *pipe) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		close(p.done)
		p.changed()
	}
}

func (p *pipe) setDeadline(d time.Time) {
	p.mu.Lock()
	p.deadline = d
	p.changed()
	p.mu.Unlock()
}
