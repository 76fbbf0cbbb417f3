package mesh

import (
	"context"
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

// TestDialKeepsABusyLiveConnection: a peer at its stream limit makes Dial
// fail, but the connection still hears the peer, so Dial keeps it: the
// stream already open on it still works and no second connection is
// dialled (closing it cut every stream on it, a snapshot in flight too).
func TestDialKeepsABusyLiveConnection(t *testing.T) {
	sec := mustSecurity(t, mustKey(t))
	creds, err := sec.Node("srv")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultTransportConfig("127.0.0.1:0")
	cfg.HandshakeTimeout = 2 * time.Second
	cfg.MaxStreamsPerPeer = 1
	srv, err := NewQUICTransport(cfg, creds, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ch := Channel{Kind: KindRPC, Shard: 1}
	serveEcho(t, srv, ch)
	cli := newQUICNode(t, sec, "cli")
	a, err := cli.Dial(testCtx(t), "srv", srv.Addr(), ch)
	if err != nil {
		t.Fatal(err)
	}
	echo := func(seq uint64) error {
		a.SetReadDeadline(time.Now().Add(5 * time.Second))
		if err := a.SendFrame(echoHeader{Seq: seq}, nil); err != nil {
			return err
		}
		var h echoHeader
		_, err := a.RecvFrame(&h)
		return err
	}
	if err := echo(1); err != nil {
		t.Fatal(err)
	}
	// The server allows one stream: the second cannot open before ctx ends.
	ctx, cancel := context.WithTimeout(testCtx(t), 300*time.Millisecond)
	defer cancel()
	if _, err := cli.Dial(ctx, "srv", srv.Addr(), ch); err == nil {
		t.Fatal("a second stream opened beyond MaxStreamsPerPeer 1")
	}
	if err := echo(2); err != nil {
		t.Fatalf("the open stream died with the failed Dial: %v", err)
	}
	if got := cli.Stats().Dials; got != 1 {
		t.Fatalf("%d dials, want 1 (the live connection kept)", got)
	}
}
