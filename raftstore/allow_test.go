package raftstore

import (
	"context"
	"testing"
	"time"

	"dsspmesh/mesh"
)

// TestStreamLayerRefusesPeersOutsideTheRule: with SetAllow admitting only
// "member", a raft stream from "stranger" is closed unaccepted and
// counted, and one from "member" is accepted.
func TestStreamLayerRefusesPeersOutsideTheRule(t *testing.T) {
	net := mesh.NewInmemNetwork()
	node, _ := net.NewTransport("node", "node", mesh.DefaultFrameLimits())
	member, _ := net.NewTransport("member", "member", mesh.DefaultFrameLimits())
	stranger, _ := net.NewTransport("stranger", "stranger", mesh.DefaultFrameLimits())
	resolve := func(id mesh.NodeID) (string, error) { return string(id), nil }
	l, err := NewStreamLayer(node, 3, resolve)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.SetAllow(func(p mesh.NodeID) bool { return p == "member" })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ch := mesh.Channel{Kind: mesh.KindRaft, Shard: 3}
	bad, err := stranger.Dial(ctx, "node", "node", ch)
	if err != nil {
		t.Fatal(err)
	}
	bad.Write([]byte("vote for me"))
	good, err := member.Dial(ctx, "node", "node", ch)
	if err != nil {
		t.Fatal(err)
	}
	good.Write([]byte("append"))
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if p := c.(mesh.Stream).Peer(); p != "member" {
		t.Fatalf("accepted a stream from %s", p)
	}
	if l.Refused() != 1 {
		t.Fatalf("refused %d, want 1", l.Refused())
	}
	bad.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := bad.Read(make([]byte, 1)); err == nil {
		t.Fatal("the stranger's stream is still open")
	}
}
