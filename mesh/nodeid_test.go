package mesh

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func mustNodeKey(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	k, err := GenerateNodeKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func pubOf(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

func TestDeriveIDIsSelfCertifying(t *testing.T) {
	k1, k2 := mustNodeKey(t), mustNodeKey(t)
	id1 := DeriveID(pubOf(k1))
	if err := id1.Validate(); err != nil {
		t.Fatal(err)
	}
	if !id1.SelfCertifying() || len(id1) != len("node-")+26 || !strings.HasPrefix(string(id1), "node-") {
		t.Fatalf("derived id %q: self-certifying %v, length %d", id1, id1.SelfCertifying(), len(id1))
	}
	if DeriveID(pubOf(k1)) != id1 {
		t.Fatal("derivation not deterministic")
	}
	if DeriveID(pubOf(k2)) == id1 {
		t.Fatal("two keys derive one id")
	}
	// The id covers 128 bits of the hash: 26 base32 characters hold 130,
	// the last holds 3 bits and 2 zero bits.
	if derivedIDChars*5 < derivedIDBits {
		t.Fatalf("%d characters hold fewer than %d bits", derivedIDChars, derivedIDBits)
	}
	for _, legacy := range []NodeID{"node-0a1b2c3d", "a", "raw-server", NodeID(string(id1[:30])), NodeID(string(id1) + "a"),
		NodeID("node-" + strings.ToUpper(string(id1[5:]))), NodeID("node-" + strings.Repeat("1", 26))} {
		if legacy.SelfCertifying() {
			t.Errorf("%q taken for a self-certifying id", legacy)
		}
		if err := checkDerived(legacy, pubOf(k1)); err != nil {
			t.Errorf("legacy id %q refused by the derivation check: %v", legacy, err)
		}
	}
	if err := checkDerived(id1, pubOf(k1)); err != nil {
		t.Fatal(err)
	}
	if err := checkDerived(id1, pubOf(k2)); !errors.Is(err, ErrPeerIdentity) {
		t.Fatalf("id under another key: %v", err)
	}
}

func TestIssuingRefusesAnIDNotDerivedFromTheKey(t *testing.T) {
	sec := mustSecurity(t, mustKey(t))
	own, other := mustNodeKey(t), mustNodeKey(t)
	id := DeriveID(pubOf(own))
	c, err := sec.NodeWithKey(id, own)
	if err != nil {
		t.Fatal(err)
	}
	if c.ID() != id || !c.PublicKey().Equal(pubOf(own)) {
		t.Fatalf("credentials %q %x", c.ID(), c.PublicKey())
	}
	if _, err := sec.NodeWithKey(id, other); !errors.Is(err, ErrPeerIdentity) {
		t.Fatalf("certificate for %q on another key issued: %v", id, err)
	}
	if _, err := sec.Node(id); !errors.Is(err, ErrBadNodeID) {
		t.Fatalf("self-certifying id on a fresh key issued: %v", err)
	}
	if _, err := sec.NodeWithKey("node-0a1b2c3d", other); err != nil {
		t.Fatalf("legacy id: %v", err)
	}
}

func newQUICNodeCreds(t testing.TB, creds *NodeCredentials) *QUICTransport {
	t.Helper()
	cfg := DefaultTransportConfig("127.0.0.1:0")
	cfg.HandshakeTimeout = 2 * time.Second
	tr, err := NewQUICTransport(cfg, creds, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// exchange dials to at addr from from and sends one frame and waits for
// its echo; nil means the peers talked.
func exchange(t testing.TB, from *QUICTransport, to NodeID, addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	s, err := from.Dial(ctx, to, addr, Channel{Kind: KindRPC})
	if err != nil {
		return err
	}
	defer s.Close()
	s.SetDeadline(time.Now().Add(3 * time.Second))
	if err := s.SendFrame(echoHeader{Seq: 7}, nil); err != nil {
		return err
	}
	var h echoHeader
	if _, err := s.RecvFrame(&h); err != nil {
		return err
	}
	if h.Seq != 7 {
		return fmt.Errorf("echo %d", h.Seq)
	}
	return nil
}

// TestMintedCertificateForAnotherNodeRefused is the attack of a mesh-key
// holder that signs a certificate for another node's (self-certifying) id
// on its own key: every handshake refuses it, as the acceptor and as the
// dialled side, while the real node is accepted.
func TestMintedCertificateForAnotherNodeRefused(t *testing.T) {
	sec := mustSecurity(t, mustKey(t))
	vkey, akey := mustNodeKey(t), mustNodeKey(t)
	victimID := DeriveID(pubOf(vkey))
	victimCreds, err := sec.NodeWithKey(victimID, vkey)
	if err != nil {
		t.Fatal(err)
	}
	victim := newQUICNodeCreds(t, victimCreds)
	skey := mustNodeKey(t)
	serverCreds, err := sec.NodeWithKey(DeriveID(pubOf(skey)), skey)
	if err != nil {
		t.Fatal(err)
	}
	server := newQUICNodeCreds(t, serverCreds)
	serveEcho(t, server, Channel{Kind: KindRPC})

	// The attacker holds the mesh key, so it can sign anything the CA
	// signs; its certificate names the victim's id on the attacker's key.
	minted, err := sec.IssueUnchecked(victimID, akey)
	if err != nil {
		t.Fatal(err)
	}
	attacker := newQUICNodeCreds(t, minted)
	serveEcho(t, attacker, Channel{Kind: KindRPC})

	if err := exchange(t, victim, server.LocalID(), server.Addr()); err != nil {
		t.Fatalf("the real node was refused: %v", err)
	}
	if err := exchange(t, attacker, server.LocalID(), server.Addr()); err == nil {
		t.Fatal("a certificate minted for another node's id was accepted")
	} else {
		t.Logf("acceptor refused: %v", err)
	}
	// Dialling the victim's id at the attacker's address fails too (from a
	// node that holds no connection of the victim's to reuse).
	dialler := newQUICNode(t, sec, "dialler")
	if err := exchange(t, dialler, victimID, attacker.Addr()); err == nil || !strings.Contains(err.Error(), "carries a key whose id is") {
		t.Fatalf("dialler reached the attacker as %q: %v", victimID, err)
	}
}

// TestPeerCheckRefusesHandshakesAndClosePeerCuts: a node's PeerCheck (a
// revocation) refuses new handshakes from the id, and ClosePeer ends the
// connections already open.
func TestPeerCheckRefusesHandshakesAndClosePeerCuts(t *testing.T) {
	sec := mustSecurity(t, mustKey(t))
	server, peer := newQUICNode(t, sec, "server"), newQUICNode(t, sec, "peer")
	serveEcho(t, server, Channel{Kind: KindRPC})
	ctx := testCtx(t)
	s, err := peer.Dial(ctx, "server", server.Addr(), Channel{Kind: KindRPC})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendFrame(echoHeader{Seq: 1}, nil); err != nil {
		t.Fatal(err)
	}
	var h echoHeader
	if _, err := s.RecvFrame(&h); err != nil {
		t.Fatal(err)
	}
	server.SetPeerCheck(func(id NodeID, _ ed25519.PublicKey) error {
		if id == "peer" {
			return fmt.Errorf("node %q is revoked", id)
		}
		return nil
	})
	server.ClosePeer("peer", "revoked")
	s.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := s.RecvFrame(&h); err == nil {
		t.Fatal("stream of a closed peer still open")
	}
	if err := exchange(t, peer, "server", server.Addr()); err == nil {
		t.Fatal("revoked peer exchanged a frame")
	}
	// The check runs on the dialling side as well.
	peer2 := newQUICNode(t, sec, "peer2")
	serveEcho(t, peer, Channel{Kind: KindRPC})
	if err := exchange(t, server, "peer", peer.Addr()); err == nil {
		t.Fatal("node dialled a revoked peer")
	}
	if err := exchange(t, peer2, "server", server.Addr()); err != nil {
		t.Fatalf("another peer refused: %v", err)
	}
}

// TestPeerCheckGetsOnlyALifelongKey: a node's PeerCheck is given the key of
// a certificate that marks it as the node's own for life (NodeWithKey: a
// legacy id of an upgraded data dir), and no key for one made on a fresh
// key at start (Node: what builds before self-certifying ids sent), so a
// node pins only a key that stays.
func TestPeerCheckGetsOnlyALifelongKey(t *testing.T) {
	sec := mustSecurity(t, mustKey(t))
	server := newQUICNode(t, sec, "server")
	serveEcho(t, server, Channel{Kind: KindRPC})
	seen := make(chan ed25519.PublicKey, 4)
	server.SetPeerCheck(func(id NodeID, key ed25519.PublicKey) error {
		if id != "server" {
			seen <- key
		}
		return nil
	})
	k := mustNodeKey(t)
	lifelong, err := sec.NodeWithKey("node-0a1b2c3d", k)
	if err != nil {
		t.Fatal(err)
	}
	if err := exchange(t, newQUICNodeCreds(t, lifelong), "server", server.Addr()); err != nil {
		t.Fatal(err)
	}
	if got := <-seen; !got.Equal(pubOf(k)) {
		t.Fatalf("lifelong key seen as %x", got)
	}
	if err := exchange(t, newQUICNode(t, sec, "node-11111111"), "server", server.Addr()); err != nil {
		t.Fatal(err)
	}
	if got := <-seen; got != nil {
		t.Fatalf("a key of one start handed over for pinning: %x", got)
	}
}
