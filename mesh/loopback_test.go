package mesh

import (
	"errors"
	"io"
	"testing"
)

// A node's stream to itself carries frames to its own listener without a
// connection: no QUIC connection is made, the far end's peer is the node,
// the node hears itself, and closing the transport ends the stream.
func TestQUICDialToItselfStaysInMemory(t *testing.T) {
	sec := mustSecurity(t, mustKey(t))
	a := newQUICNode(t, sec, "a")
	ch := Channel{Kind: KindRPC, Shard: 2}
	ln, err := a.Listen(ch)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	s, err := a.Dial(ctx, "a", a.Addr(), ch)
	if err != nil {
		t.Fatal(err)
	}
	in, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
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

	s2, err := a.Dial(ctx, "a", a.Addr(), ch)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ln.Accept(ctx); err != nil {
		t.Fatal(err)
	}
	a.Close()
	if _, err := s2.RecvFrame(&h); !errors.Is(err, io.EOF) {
		t.Fatalf("after Close: %v, want EOF", err)
	}
	if _, err := a.Dial(ctx, "a", a.Addr(), ch); !errors.Is(err, ErrClosed) {
		t.Fatalf("dial after Close: %v, want ErrClosed", err)
	}
}

func TestQUICDialToItselfOnAnUnknownChannelFails(t *testing.T) {
	sec := mustSecurity(t, mustKey(t))
	a := newQUICNode(t, sec, "a")
	if _, err := a.Dial(testCtx(t), "a", a.Addr(), Channel{Kind: KindRaft, Shard: 9}); !errors.Is(err, ErrUnknownChannel) {
		t.Fatalf("dial: %v, want ErrUnknownChannel", err)
	}
	if st := a.Stats(); st.UnroutedStreams != 1 || st.Dials != 0 {
		t.Fatalf("stats %+v: want one unrouted stream, no connection", st)
	}
}
