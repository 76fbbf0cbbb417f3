package mesh

import (
	"testing"

	"dsspmesh/internal/wait"
)

// TestPeerSilenceOfAKilledPeer: while the peer answers, its silence stays
// below a keep-alive period; once its process is gone without a word (its
// socket closed under QUIC, as kill -9 does) the silence grows, long
// before the connection's idle timeout closes it.
func TestPeerSilenceOfAKilledPeer(t *testing.T) {
	sec := mustSecurity(t, mustKey(t))
	client := newQUICNode(t, sec, "client")
	server := newQUICNode(t, sec, "server")
	ch := Channel{Kind: KindRPC}
	serveEcho(t, server, ch)
	s, err := client.Dial(testCtx(t), "server", server.Addr(), ch)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.SendFrame(echoHeader{Seq: 1}, nil); err != nil {
		t.Fatal(err)
	}
	var h echoHeader
	if _, err := s.RecvFrame(&h); err != nil {
		t.Fatal(err)
	}
	if d, ok := client.PeerSilence("server"); !ok || d > client.cfg.keepAlive() {
		t.Fatalf("live peer: silence %s, connected %v", d, ok)
	}
	if _, ok := client.PeerSilence("nobody"); ok {
		t.Fatal("a peer never dialled reported connected")
	}
	server.udp.Close() // gone without a CONNECTION_CLOSE
	wait.For(t, client.cfg.IdleTimeout, "the killed peer's silence to pass two keep-alive periods", func() bool {
		d, ok := client.PeerSilence("server")
		return ok && d >= 2*client.cfg.keepAlive()
	})
}
