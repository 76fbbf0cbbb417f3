package mesh

import (
	"errors"
	"testing"
	"time"
)

// TestConnectionsPerPeerCapped: with MaxConnsPerPeer 1, a second
// transport holding the same identity connects, and the first one's
// connection — the oldest — is closed and counted.
func TestConnectionsPerPeerCapped(t *testing.T) {
	sec := mustSecurity(t, mustKey(t))
	creds, err := sec.Node("srv")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultTransportConfig("127.0.0.1:0")
	cfg.HandshakeTimeout = 2 * time.Second
	cfg.MaxConnsPerPeer = 1
	srv, err := NewQUICTransport(cfg, creds, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ch := Channel{Kind: KindRPC, Shard: 1}
	serveEcho(t, srv, ch)
	echo := func(tr *QUICTransport, seq uint64) error {
		s, err := tr.Dial(testCtx(t), "srv", srv.Addr(), ch)
		if err != nil {
			return err
		}
		s.SetReadDeadline(time.Now().Add(5 * time.Second))
		if err := s.SendFrame(echoHeader{Seq: seq}, nil); err != nil {
			return err
		}
		var h echoHeader
		_, err = s.RecvFrame(&h)
		return err
	}
	first, second := newQUICNode(t, sec, "peer"), newQUICNode(t, sec, "peer")
	if err := echo(first, 1); err != nil {
		t.Fatal(err)
	}
	if err := echo(second, 2); err != nil {
		t.Fatalf("the newest connection was not served: %v", err)
	}
	if got := srv.Stats().ConnsRefused; got != 1 {
		t.Fatalf("ConnsRefused %d, want 1", got)
	}
}

// TestSetMaxPayloadRefusesLargerFrames: a stream limited to 8 payload bytes
// refuses a 12-byte frame before reading it, as a frame error.
func TestSetMaxPayloadRefusesLargerFrames(t *testing.T) {
	net := NewInmemNetwork()
	a, _ := net.NewTransport("a", "a", DefaultFrameLimits())
	b, _ := net.NewTransport("b", "b", DefaultFrameLimits())
	ch := Channel{Kind: KindRPC, Shard: 1}
	ln, err := b.Listen(ch)
	if err != nil {
		t.Fatal(err)
	}
	s, err := a.Dial(testCtx(t), "b", "b", ch)
	if err != nil {
		t.Fatal(err)
	}
	s.SendFrame(echoHeader{Seq: 1}, make([]byte, 8))
	s.SendFrame(echoHeader{Seq: 2}, make([]byte, 12))
	r, err := ln.Accept(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	r.SetMaxPayload(8)
	var h echoHeader
	if p, err := r.RecvFrame(&h); err != nil || len(p) != 8 {
		t.Fatalf("8 bytes: %v", err)
	}
	_, err = r.RecvFrame(&h)
	var fe *FrameError
	if !errors.As(err, &fe) {
		t.Fatalf("12 bytes: got %v, want a frame error", err)
	}
	t.Logf("refused: %v", err)
}
