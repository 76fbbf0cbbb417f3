package mesh

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func inmemPair(t *testing.T) (*InmemNetwork, *InmemTransport, *InmemTransport, Listener) {
	n := NewInmemNetwork()
	a, err := n.NewTransport("a", "addr-a", DefaultFrameLimits())
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.NewTransport("b", "addr-b", DefaultFrameLimits())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	ln, err := b.Listen(Channel{Kind: KindRPC})
	if err != nil {
		t.Fatal(err)
	}
	return n, a, b, ln
}

func TestInmemFramesAndFaults(t *testing.T) {
	n, a, b, ln := inmemPair(t)
	ctx := testCtx(t)
	s, err := a.Dial(ctx, "b", "addr-b", Channel{Kind: KindRPC})
	if err != nil {
		t.Fatal(err)
	}
	in, err := ln.Accept(ctx)
	if err != nil || in.Peer() != "a" {
		t.Fatalf("accept: %v %v", in, err)
	}
	recv := func() uint64 {
		t.Helper()
		var h echoHeader
		if _, err := in.RecvFrame(&h); err != nil {
			t.Fatal(err)
		}
		return h.Seq
	}
	var seq atomic.Uint64
	n.SetFaults(func(from, to NodeID, ch Channel, frame []byte) Fault {
		switch seq.Add(1) {
		case 1:
			return Fault{Drop: true}
		case 2:
			return Fault{Duplicate: true}
		}
		return Fault{}
	})
	for i := uint64(1); i <= 3; i++ {
		if err := s.SendFrame(echoHeader{Seq: i}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if got := []uint64{recv(), recv(), recv()}; got[0] != 2 || got[1] != 2 || got[2] != 3 {
		t.Fatalf("received %v, want [2 2 3] (1 dropped, 2 duplicated)", got)
	}

	// Corruption: a flipped length byte closes the stream with a counted error.
	n.SetFaults(func(from, to NodeID, ch Channel, frame []byte) Fault {
		frame[0] = 0xff
		return Fault{}
	})
	s.SendFrame(echoHeader{Seq: 4}, nil)
	var h echoHeader
	if _, err := in.RecvFrame(&h); !errors.Is(err, ErrBadFrame) {
		t.Fatalf("corrupted frame: %v", err)
	}
	if b.Stats().FrameErrors != 1 {
		t.Fatalf("stats %+v", b.Stats())
	}
	n.SetFaults(nil)
}

func TestInmemDelayKeepsOrder(t *testing.T) {
	n, a, _, ln := inmemPair(t)
	ctx := testCtx(t)
	s, _ := a.Dial(ctx, "b", "addr-b", Channel{Kind: KindRPC})
	in, _ := ln.Accept(ctx)
	n.SetFaults(func(from, to NodeID, ch Channel, frame []byte) Fault {
		if frame[len(frame)-1] == 1 { // the header {s: 1} ends in 0x01
			return Fault{Delay: 30 * time.Millisecond}
		}
		return Fault{}
	})
	start := time.Now()
	s.SendFrame(echoHeader{Seq: 1}, nil)
	s.SendFrame(echoHeader{Seq: 2}, nil)
	for want := uint64(1); want <= 2; want++ {
		var h echoHeader
		if _, err := in.RecvFrame(&h); err != nil || h.Seq != want {
			t.Fatalf("got %d %v, want %d", h.Seq, err, want)
		}
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Fatalf("delayed frame arrived after %s", d)
	}
}

func TestInmemPartitionAndIdentity(t *testing.T) {
	n, a, b, ln := inmemPair(t)
	ctx := testCtx(t)
	s, _ := a.Dial(ctx, "b", "addr-b", Channel{Kind: KindRPC})
	in, _ := ln.Accept(ctx)
	n.Partition([]NodeID{"a"}, []NodeID{"b"})
	if _, err := a.Dial(ctx, "b", "addr-b", Channel{Kind: KindRPC}); !errors.Is(err, ErrNoRoute) {
		t.Fatalf("dial across partition: %v", err)
	}
	s.SendFrame(echoHeader{Seq: 1}, nil) // lost in the partition
	in.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	var h echoHeader
	if _, err := in.RecvFrame(&h); err == nil {
		t.Fatal("frame crossed the partition")
	}
	n.Heal()
	if _, err := a.Dial(ctx, "c", "addr-b", Channel{Kind: KindRPC}); !errors.Is(err, ErrPeerIdentity) {
		t.Fatalf("dial c at b's address: %v", err)
	}
	if _, err := a.Dial(ctx, "b", "addr-b", Channel{Kind: KindRaft, Shard: 1}); !errors.Is(err, ErrUnknownChannel) {
		t.Fatalf("dial to unlistened channel: %v", err)
	}
	b.Close()
	if _, err := in.Read(make([]byte, 1)); err == nil {
		t.Fatal("stream survived its transport")
	}
	if _, err := ln.Accept(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("accept after close: %v", err)
	}
}

func TestInmemMembershipEvents(t *testing.T) {
	c := NewInmemCluster()
	a, _ := c.NewMember(Meta{ID: "a"}, "ga")
	b, _ := c.NewMember(Meta{ID: "b"}, "gb")
	ctx := testCtx(t)
	if _, err := a.Join(ctx, []string{"ga"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Join(ctx, []string{"ga"}); err != nil {
		t.Fatal(err)
	}
	if ev := <-a.Events(); ev.Type != EventJoin || ev.Member.ID != "b" {
		t.Fatalf("%+v", ev)
	}
	if len(a.Members()) != 2 {
		t.Fatalf("members %v", a.Members())
	}
	c.Fail("b")
	if ev := <-a.Events(); ev.Type != EventFailed || ev.Member.ID != "b" {
		t.Fatalf("%+v", ev)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	lone, _ := c.NewMember(Meta{ID: "z"}, "gz")
	if _, err := lone.Join(short, []string{"nowhere"}); !errors.Is(err, ErrNotJoined) {
		t.Fatalf("join nowhere: %v", err)
	}
}
