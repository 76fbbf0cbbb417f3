package mesh

import (
	"errors"
	"io"
	"os"
	"testing"
	"time"
)

// selfNode is a QUIC transport listening on ch, and a way to open a
// stream to itself on ch: the dialled end and the accepted one.
func selfNode(t *testing.T, ch Channel) (*QUICTransport, func() (Stream, Stream)) {
	t.Helper()
	a := newQUICNode(t, mustSecurity(t, mustKey(t)), "a")
	ln, err := a.Listen(ch)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	return a, func() (Stream, Stream) {
		t.Helper()
		s, err := a.Dial(ctx, "a", a.Addr(), ch)
		if err != nil {
			t.Fatal(err)
		}
		in, err := ln.Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s, in
	}
}

// A node's stream to itself carries frames to its own listener without a
// connection: no QUIC connection is made, the far end's peer is the node,
// the node hears itself, and closing the transport ends the stream.
func TestQUICDialToItselfStaysInMemory(t *testing.T) {
	ch := Channel{Kind: KindRPC, Shard: 2}
	a, dial := selfNode(t, ch)
	s, in := dial()
	if in.Peer() != "a" || s.Peer() != "a" || in.Channel() != ch {
		t.Fatalf("ends: accepted peer %q channel %v, dialled peer %q", in.Peer(), in.Channel(), s.Peer())
	}
	payload := []byte("gradient")
	if err := s.SendFrame(echoHeader{Seq: 7}, payload); err != nil {
		t.Fatal(err)
	}
	payload[0] = 'X' // SendFrame keeps no reference to the payload
	var h echoHeader
	if p, err := in.RecvFrame(&h); err != nil || h.Seq != 7 || string(p) != "gradient" {
		t.Fatalf("got %+v %q %v", h, p, err)
	}
	if err := in.SendFrame(echoHeader{Seq: 8}, []byte("theta")); err != nil {
		t.Fatal(err)
	}
	if p, err := s.RecvFrame(&h); err != nil || h.Seq != 8 || string(p) != "theta" {
		t.Fatalf("reply %+v %q %v", h, p, err)
	}
	if st := a.Stats(); st.Dials != 0 || st.StreamsOpened != 1 || st.StreamsAccepted != 1 {
		t.Fatalf("stats %+v: want no connection dialled, one stream opened and accepted", st)
	}
	if quiet, connected := a.PeerSilence("a"); !connected || quiet != 0 {
		t.Fatalf("PeerSilence(self) = %v, %v; want 0, true", quiet, connected)
	}

	// A frame larger than the receiver allows is refused as on QUIC.
	in.SetMaxPayload(4)
	if err := s.SendFrame(echoHeader{Seq: 9}, []byte("too long")); err != nil {
		t.Fatal(err)
	}
	if _, err := in.RecvFrame(&h); !errors.Is(err, ErrBadFrame) {
		t.Fatalf("oversized frame: %v, want ErrBadFrame", err)
	}

	s2, _ := dial()
	a.Close()
	if _, err := s2.RecvFrame(&h); !errors.Is(err, io.EOF) {
		t.Fatalf("after Close: %v, want EOF", err)
	}
	if _, err := a.Dial(testCtx(t), "a", a.Addr(), ch); !errors.Is(err, ErrClosed) {
		t.Fatalf("dial after Close: %v, want ErrClosed", err)
	}
}

func TestQUICDialToItselfOnAnUnknownChannelFails(t *testing.T) {
	a, _ := selfNode(t, Channel{Kind: KindRPC, Shard: 0})
	if _, err := a.Dial(testCtx(t), "a", a.Addr(), Channel{Kind: KindRaft, Shard: 9}); !errors.Is(err, ErrUnknownChannel) {
		t.Fatalf("dial: %v, want ErrUnknownChannel", err)
	}
	if st := a.Stats(); st.UnroutedStreams != 1 || st.Dials != 0 {
		t.Fatalf("stats %+v: want one unrouted stream, no connection", st)
	}
}

// A large payload to itself is lent, not copied: SendFrame returns once
// the reader has it; a write deadline or a close while it waits cuts the
// stream and gives the payload back.
func TestQUICDialToItselfLendsLargePayloads(t *testing.T) {
	_, dial := selfNode(t, Channel{Kind: KindRPC, Shard: 1})
	big := make([]byte, 3*lendBytes)
	for i := range big {
		big[i] = byte(i)
	}

	s, in := dial()
	sent := make(chan error, 1)
	go func() { sent <- s.SendFrame(echoHeader{Seq: 1}, big) }()
	var h echoHeader
	p, err := in.RecvFrame(&h)
	if err != nil || h.Seq != 1 || string(p) != string(big) {
		t.Fatalf("got seq %d, %d bytes, %v", h.Seq, len(p), err)
	}
	if err := <-sent; err != nil {
		t.Fatalf("send: %v", err)
	}

	// Nobody reads: the write deadline ends the wait and the stream.
	s, in = dial()
	s.SetWriteDeadline(time.Now().Add(-time.Second))
	if err := s.SendFrame(echoHeader{Seq: 2}, big); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("send past the write deadline: %v, want ErrDeadlineExceeded", err)
	}
	if p, err := in.RecvFrame(&h); err == nil {
		t.Fatalf("the cut frame arrived whole (%d bytes)", len(p))
	}

	// The reader closes while the sender waits.
	s, in = dial()
	go func() { sent <- s.SendFrame(echoHeader{Seq: 3}, big) }()
	in.Close()
	if err := <-sent; err == nil {
		t.Fatal("send to a closed stream succeeded")
	}
}

// A watcher that moves the write deadline while a lent payload waits (the
// client's abort) ends the wait.
func TestQUICDialToItselfAbortsALentPayload(t *testing.T) {
	_, dial := selfNode(t, Channel{Kind: KindRPC, Shard: 1})
	s, _ := dial()
	sent := make(chan error, 1)
	go func() { sent <- s.SendFrame(echoHeader{Seq: 1}, make([]byte, lendBytes)) }()
	s.SetWriteDeadline(time.Now())
	if err := <-sent; err == nil {
		t.Fatal("a send nobody reads returned no error after the abort")
	}
}
