package shard

import (
	"context"
	"io"
	"testing"
	"time"

	"dsspmesh/internal/wait"
	"dsspmesh/mesh"
	"dsspmesh/raftstore"
	"dsspmesh/shardapi"
)

// quicShard is a one-voter shard of n parameters served over a real QUIC
// transport, whose flow control holds a writer back when its reader does
// not read (the in-memory transport buffers without bound), and a QUIC
// transport for the worker "slow" that dials it.
func quicShard(t *testing.T, n int, writeTimeout time.Duration) (*Replica, mesh.Stream) {
	t.Helper()
	key, err := mesh.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	sec, err := mesh.NewSecurity(key)
	if err != nil {
		t.Fatal(err)
	}
	log := testLogger(t)
	addrs := map[mesh.NodeID]string{}
	transport := func(id mesh.NodeID) *mesh.QUICTransport {
		creds, err := sec.Node(id)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := mesh.NewQUICTransport(mesh.DefaultTransportConfig("127.0.0.1:0"), creds, log)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		addrs[id] = tr.Addr()
		return tr
	}
	host := transport("host")
	resolve := func(id mesh.NodeID) (string, error) { return addrs[id], nil }
	rt, err := raftstore.NewMeshTransport(host, 0, resolve, log)
	if err != nil {
		t.Fatal(err)
	}
	cfg := fastConfig(0, "host")
	cfg.ReplyWriteTimeout = writeTimeout
	rep, err := NewReplica(cfg, Deps{Transport: host, Resolve: resolve, RaftTransport: rt, Stores: raftstore.NewInmem(),
		Clock: SystemClock{}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rep.Shutdown() })
	if err := rep.Bootstrap([]mesh.NodeID{"host"}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := wait.Until(ctx, 10*time.Second, "a leader", rep.IsLeader); err != nil {
		t.Fatal(err)
	}
	spec := testSpec(n, "asp")
	spec.Shard = 0
	if err := rep.Init(ctx, spec, make([]float32, n)); err != nil {
		t.Fatal(err)
	}
	st, err := transport("slow").Dial(ctx, "host", addrs["host"], mesh.Channel{Kind: mesh.KindRPC, Shard: 0})
	if err != nil {
		t.Fatal(err)
	}
	return rep, st
}

// readsUnread asks for k reads of the slice on st, each answered with the
// whole slice, and reads none of the replies: beyond the stream's
// flow-control window the shard's writes of them block.
func readsUnread(t *testing.T, st mesh.Stream, k int) {
	t.Helper()
	for i := range k {
		if err := st.SendFrame(shardapi.Request{Op: shardapi.OpRead, PushMeta: shardapi.PushMeta{PushID: shardapi.PushID{Worker: "slow", Iter: int64(i)}}}, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// A worker that keeps its stream open and stops reading it holds a reply's
// write only for Config.ReplyWriteTimeout (plus the frame's time at
// shardapi.MinReplyRate); then the shard drops the stream, and counts it.
func TestAStreamNotReadIsDropped(t *testing.T) {
	const n = 128 << 10 // a 512 KiB slice: the second reply fills QUIC's initial window
	rep, st := quicShard(t, n, 100*time.Millisecond)
	readsUnread(t, st, 4)
	if err := wait.Until(context.Background(), 20*time.Second, "a reply's write timed out", func() bool {
		return rep.Status().Service.ReplyWriteTimeouts > 0
	}); err != nil {
		t.Fatal(err)
	}
	// The stream ends before the four replies (2 MiB) are through.
	got, err := io.Copy(io.Discard, st)
	if err == nil && got >= 4*4*n {
		t.Fatalf("read %d bytes, every reply, from a stream the shard dropped", got)
	}
	t.Logf("the dropped stream gave %d bytes of the %d its replies hold (%v)", got, 4*4*n, err)
}

// Shutdown does not wait for a write to a worker that does not read: the
// service's stop moves the write's deadline to now before it closes the
// stream (a graceful leave hung so in the fault tier, the evaluator's
// write blocked for minutes).
func TestShutdownDoesNotWaitForAWorkerThatDoesNotRead(t *testing.T) {
	const n = 256 << 10 // a 1 MiB slice: one reply is more than QUIC's initial window
	rep, st := quicShard(t, n, time.Hour)
	readsUnread(t, st, 1)
	// The reply's header arrives: the shard is writing a frame that the
	// window cannot hold, and this reader takes no more of it.
	var header [8]byte
	if _, err := io.ReadFull(st, header[:]); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- rep.Shutdown() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown still waiting 10 s after it began, on a write to a worker that does not read")
	}
}
