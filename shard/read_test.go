package shard

import (
	"context"
	"errors"
	"testing"
	"time"

	"dsspmesh/mesh"
	"dsspmesh/shardapi"
)

// TestReadIsLinearizable: a read through any replica returns the leader's
// applied slice and clocks, follows a NotLeader redirect, and after the
// leader is killed the new leader answers with every acknowledged push in.
func TestReadIsLinearizable(t *testing.T) {
	const n = 16
	c := newCluster(t, 6)
	ids := nodeIDs(3)
	spec := shardapi.Spec{Shard: 6, Len: n, Policy: "ssp:3", Optimizer: shardapi.DefaultOptimizer()}

	early := c.client("reader-early", ids[:1])
	c.start(ids[0])
	c.start(ids[1])
	c.start(ids[2])
	if err := c.replica(ids[0]).Bootstrap(ids); err != nil {
		t.Fatal(err)
	}
	l := c.waitLeader("")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, err := early.ReadInto(ctx, nil)
	cancel()
	if !errors.Is(err, shardapi.ErrNotInitialized) {
		t.Fatalf("read before Init: %v, want ErrNotInitialized", err)
	}
	if err := l.Init(context.Background(), spec, make([]float32, n)); err != nil {
		t.Fatal(err)
	}

	w := c.client("w", ids)
	if _, err := w.AddWorker(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	var rep shardapi.PushReply
	for it := range int64(5) {
		if rep, err = w.Push(context.Background(), shardapi.Push{Iter: it, Samples: 10, ComputeNs: 1, Payload: w.Encode(gradFor("w", it, n), 10)}); err != nil {
			t.Fatal(err)
		}
	}
	last := rep.Params
	// Start at a follower: the read is redirected to the leader.
	var follower = ids[0]
	for _, id := range ids {
		if id != l.cfg.ID {
			follower = id
			break
		}
	}
	r := c.client("reader", []mesh.NodeID{follower})
	sl, err := r.ReadInto(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if sl.Leader != l.cfg.ID || sl.Min != 5 || sl.Max != 5 || sl.Samples != 50 || !equalFloats(sl.Params, last) {
		t.Fatalf("read %+v, want leader %s, clocks 5, 50 samples, the last push's parameters %v", sl, l.cfg.ID, last)
	}
	if sl.Index != l.FSM().AppliedIndex() {
		t.Fatalf("read at index %d, leader applied %d", sl.Index, l.FSM().AppliedIndex())
	}

	c.kill(l.cfg.ID)
	nl := c.waitLeader(l.cfg.ID)
	r2 := c.client("reader2", ids)
	dst := make([]float32, len(last))
	sl2, err := r2.ReadInto(context.Background(), dst)
	if err != nil {
		t.Fatal(err)
	}
	if sl2.Leader != nl.cfg.ID || sl2.Min != 5 || !equalFloats(sl2.Params, last) {
		t.Fatalf("read after failover %+v, want leader %s with every acknowledged push", sl2, nl.cfg.ID)
	}
	if &sl2.Params[0] != &dst[0] {
		t.Fatal("ReadInto did not decode into the slice given")
	}
}
