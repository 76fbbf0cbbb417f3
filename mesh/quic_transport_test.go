package mesh

import (
	"context"
	"runtime"
	"testing"
	"time"

	"dsspmesh/internal/wait"
)

func newQUICNode(t testing.TB, sec *Security, id NodeID) *QUICTransport {
	t.Helper()
	creds, err := sec.Node(id)
	if err != nil {
		t.Fatal(err)
	}
	return newQUICNodeCreds(t, creds)
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

type echoHeader struct {
	Seq uint64 `msgpack:"s"`
}

// serveEcho answers every frame on ch with the same header and payload.
func serveEcho(t testing.TB, tr Transport, ch Channel) {
	ln, err := tr.Listen(ch)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			s, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			go func() {
				defer s.Close()
				for {
					var h echoHeader
					p, err := s.RecvFrame(&h)
					if err != nil {
						return
					}
					if err := s.SendFrame(h, p); err != nil {
						return
					}
				}
			}()
		}
	}()
}

func TestQUICRoundTripAndPeerIdentity(t *testing.T) {
	sec := mustSecurity(t, mustKey(t))
	a, b := newQUICNode(t, sec, "a"), newQUICNode(t, sec, "b")
	ch := Channel{Kind: KindRPC, Shard: 3}
	ln, err := b.Listen(ch)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	s, err := a.Dial(ctx, "b", b.Addr(), ch)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendFrame(echoHeader{Seq: 1}, []byte("grad")); err != nil {
		t.Fatal(err)
	}
	in, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if in.Peer() != "a" || in.Channel() != ch {
		t.Fatalf("accepted peer %q channel %v, want a %v", in.Peer(), in.Channel(), ch)
	}
	var h echoHeader
	p, err := in.RecvFrame(&h)
	if err != nil || h.Seq != 1 || string(p) != "grad" {
		t.Fatalf("got %+v %q %v", h, p, err)
	}
	// The stream is long-lived: a reply and a second request on it.
	if err := in.SendFrame(echoHeader{Seq: 2}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecvFrame(&h); err != nil || h.Seq != 2 {
		t.Fatalf("reply %+v %v", h, err)
	}
	// Dialling b's address while expecting another id fails.
	if _, err := a.Dial(ctx, "c", b.Addr(), ch); err == nil {
		t.Fatal("dial expecting c reached b")
	}
	if st := a.Stats(); st.DialFailures != 1 {
		t.Fatalf("stats %+v, want 1 dial failure", st)
	}
}

func TestQUICWrongKeyOrNoKeyCannotConnect(t *testing.T) {
	mesh := mustSecurity(t, mustKey(t))
	server := newQUICNode(t, mesh, "server")
	serveEcho(t, server, Channel{Kind: KindRPC})
	cases := map[string]*Security{
		"wrong key": mustSecurity(t, mustKey(t)),
		"no key":    InsecureSecurity(testLogger(t)),
	}
	for name, sec := range cases {
		t.Run(name, func(t *testing.T) {
			intruder := newQUICNode(t, sec, "intruder")
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			s, err := intruder.Dial(ctx, "server", server.Addr(), Channel{Kind: KindRPC})
			if err == nil {
				// TLS 1.3 lets the client finish before the server has
				// checked its certificate; the server must then refuse.
				err = s.SendFrame(echoHeader{Seq: 1}, nil)
				if err == nil {
					var h echoHeader
					_, err = s.RecvFrame(&h)
				}
			}
			if err == nil {
				t.Fatal("intruder exchanged a frame with the mesh")
			}
			t.Logf("refused: %v", err)
		})
	}
	// And a mesh node will not talk to a server outside the mesh.
	outsider := newQUICNode(t, mustSecurity(t, mustKey(t)), "outsider")
	serveEcho(t, outsider, Channel{Kind: KindRPC})
	member := newQUICNode(t, mesh, "member")
	if _, err := member.Dial(testCtx(t), "outsider", outsider.Addr(), Channel{Kind: KindRPC}); err == nil {
		t.Fatal("mesh node accepted a server with a foreign certificate")
	}
}

func TestQUICCannotImpersonateAnotherID(t *testing.T) {
	sec := mustSecurity(t, mustKey(t))
	victim := newQUICNode(t, sec, "victim")
	impostor := newQUICNode(t, sec, "impostor") // valid mesh certificate, but for its own id
	client := newQUICNode(t, sec, "client")
	serveEcho(t, impostor, Channel{Kind: KindRPC})

	// The client believes "victim" lives at the impostor's address (say,
	// a poisoned membership entry): the dial must fail on the id check.
	_, err := client.Dial(testCtx(t), "victim", impostor.Addr(), Channel{Kind: KindRPC})
	if err == nil {
		t.Fatal("impostor answered as victim")
	}
	t.Logf("refused: %v", err)

	// On accept, the peer's identity is its certificate's, whatever it claims.
	ln, err := victim.Listen(Channel{Kind: KindRPC})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := impostor.Dial(testCtx(t), "victim", victim.Addr(), Channel{Kind: KindRPC}); err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if s.Peer() != "impostor" {
		t.Fatalf("accepted stream attributed to %q, want impostor", s.Peer())
	}
}

// TestQUICMalformedInputClosesStreamNodeStaysUp sends every malformed frame
// over a real stream: each closes its stream with a counted error, memory
// stays bounded, and the node keeps serving good streams.
func TestQUICMalformedInputClosesStreamNodeStaysUp(t *testing.T) {
	sec := mustSecurity(t, mustKey(t))
	server, client := newQUICNode(t, sec, "server"), newQUICNode(t, sec, "client")
	ch := Channel{Kind: KindRPC}
	serveEcho(t, server, ch)
	ctx := testCtx(t)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	bad := malformedFrames(t)
	var truncatedBeforeEOF int
	for name, in := range bad {
		s, err := client.Dial(ctx, "server", server.Addr(), ch)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Write(in); err != nil {
			t.Fatalf("%s: write: %v", name, err)
		}
		s.(*quicStream).Stream.Close() // end our side so truncated frames end
		var h echoHeader
		if _, err := s.RecvFrame(&h); err == nil {
			t.Fatalf("%s: server answered a malformed frame", name)
		}
		truncatedBeforeEOF++
	}
	wait.For(t, 10*time.Second, "frame errors counted", func() bool { return server.Stats().FrameErrors == uint64(len(bad)) })
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 64<<20 {
		t.Fatalf("heap grew by %d bytes", grew)
	}
	t.Logf("%d malformed inputs refused; heap %d -> %d bytes; stats %+v", truncatedBeforeEOF, before.HeapAlloc, after.HeapAlloc, server.Stats())

	// Still up.
	s, err := client.Dial(ctx, "server", server.Addr(), ch)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendFrame(echoHeader{Seq: 9}, []byte{1}); err != nil {
		t.Fatal(err)
	}
	var h echoHeader
	if _, err := s.RecvFrame(&h); err != nil || h.Seq != 9 {
		t.Fatalf("after malformed input: %+v %v", h, err)
	}
}

func TestQUICRefusesBadPreambleAndUnknownChannel(t *testing.T) {
	sec := mustSecurity(t, mustKey(t))
	server, client := newQUICNode(t, sec, "server"), newQUICNode(t, sec, "client")
	ctx := testCtx(t)
	s, err := client.Dial(ctx, "server", server.Addr(), Channel{Kind: KindRaft, Shard: 77})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(make([]byte, 1)); err == nil {
		t.Fatal("stream to a channel with no listener stayed open")
	}
	wait.For(t, 10*time.Second, "unrouted stream counted", func() bool { return server.Stats().UnroutedStreams == 1 })
}

func TestQUICReconnectsAfterPeerRestart(t *testing.T) {
	sec := mustSecurity(t, mustKey(t))
	client := newQUICNode(t, sec, "client")
	server := newQUICNode(t, sec, "server")
	ch := Channel{Kind: KindRPC}
	serveEcho(t, server, ch)
	roundTrip := func(tr Transport, addr string) error {
		s, err := client.Dial(testCtx(t), "server", addr, ch)
		if err != nil {
			return err
		}
		defer s.Close()
		if err := s.SendFrame(echoHeader{Seq: 1}, nil); err != nil {
			return err
		}
		var h echoHeader
		_, err = s.RecvFrame(&h)
		return err
	}
	if err := roundTrip(server, server.Addr()); err != nil {
		t.Fatal(err)
	}
	addr := server.Addr()
	server.Close()
	creds, _ := sec.Node("server")
	cfg := DefaultTransportConfig(addr)
	restarted, err := NewQUICTransport(cfg, creds, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer restarted.Close()
	serveEcho(t, restarted, ch)
	// The cached connection is dead. A request that raced the close may
	// fail (the ambiguous error of the contract); the retry dials again.
	if err := roundTrip(restarted, addr); err != nil {
		t.Logf("first request after restart failed: %v", err)
		if err := roundTrip(restarted, addr); err != nil {
			t.Fatalf("retry after restart: %v", err)
		}
	}
	if d := client.Stats().Dials; d != 2 {
		t.Fatalf("dials %d, want 2", d)
	}
}

func TestTransportConfigValidate(t *testing.T) {
	c := DefaultTransportConfig("127.0.0.1:0")
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.IdleTimeout = time.Millisecond
	if err := c.Validate(); err == nil {
		t.Fatal("IdleTimeout below HandshakeTimeout accepted")
	}
}
