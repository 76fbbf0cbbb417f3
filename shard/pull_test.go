package shard

import (
	"context"
	"testing"

	"dsspmesh/clock"
	"dsspmesh/shardapi"
)

// TestPushKeepAndVersions: an OK carries the version of the slice it
// carries (applied index, t_min, read under one lock), and a push that
// keeps its slice gets an OK with the version only; both are applied.
func TestPushKeepAndVersions(t *testing.T) {
	const n = 8
	c := newCluster(t, 6)
	ids := c.bootZeros(3, n, "ssp:2")
	leader := c.waitLeader("")
	a, b := c.client("a", ids), c.client("b", ids)
	for _, cl := range []*shardapi.Client{a, b} {
		if _, err := cl.AddWorker(context.Background(), 0); err != nil {
			t.Fatal(err)
		}
	}
	// a pushes 0 and 1 (gap 2 ≤ s = 2): t_min stays 0 while b is at 0.
	p, err := a.Push(context.Background(), shardapi.Push{Iter: 0, Samples: 1, ComputeNs: 1, Payload: a.Encode(gradFor("a", 0, n), 1)})
	if err != nil || len(p.Params) != n {
		t.Fatalf("push 0: %d parameters, %v", len(p.Params), err)
	}
	if v := p.Version; v.Index == 0 || v.Min != 0 {
		t.Fatalf("version after a's push 0: %+v; want an index and t_min 0", v)
	}
	into := make([]float32, n)
	k, err := a.Push(context.Background(), shardapi.Push{Iter: 1, Samples: 1, ComputeNs: 1, Payload: a.Encode(gradFor("a", 1, n), 1), Keep: true, Into: into})
	if err != nil {
		t.Fatal(err)
	}
	if v := k.Version; v.Index <= p.Version.Index || v.Min != 0 || k.Params != nil {
		t.Fatalf("kept push 1: version %+v after %+v, %d parameters", v, p.Version, len(k.Params))
	}
	// b's push 0 raises t_min to 1.
	q, err := b.Push(context.Background(), shardapi.Push{Iter: 0, Samples: 1, ComputeNs: 1, Payload: b.Encode(gradFor("b", 0, n), 1)})
	if err != nil {
		t.Fatal(err)
	}
	if v := q.Version; v.Min != 1 || v.Index != leader.FSM().AppliedIndex() {
		t.Fatalf("b's version %+v; want t_min 1 at the applied index %d", v, leader.FSM().AppliedIndex())
	}
	st := leader.Status()
	if st.Pushes != 3 {
		t.Fatalf("%d pushes applied, want 3", st.Pushes)
	}
	for _, w := range st.Workers {
		if w.ID == clock.WorkerID("a") && w.Clock != 2 {
			t.Fatalf("a's clock %d, want 2", w.Clock)
		}
	}
}
