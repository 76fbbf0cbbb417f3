package shard

import (
	"context"
	"errors"
	"math"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"dsspmesh/clock"
	"dsspmesh/mesh"
	"dsspmesh/raftstore"
	"dsspmesh/shardapi"
)

func groupHarness(t *testing.T) *fsmHarness {
	spec := testSpec(2, "asp")
	spec.Optimizer = shardapi.Optimizer{Kind: shardapi.SGD, Schedule: shardapi.Schedule{LR: 1, Gamma: 1}}
	h := newFSMHarness(t, spec, []float32{10, 20})
	for _, w := range []clock.WorkerID{"a", "b", "c"} {
		h.apply(encodeWorker(entryAddWorker, w, 0))
	}
	return h
}

// A summed group is applied as its pushes would be one by one: every push
// applied with its own gate outcome, θ moved by the sum, plus a push with
// its own gradient after the group in the same step.
func TestFSMAppliesSummedGroup(t *testing.T) {
	h := groupHarness(t)
	group := []Push{{PushMeta: meta("a", 0, 2), RecvNanos: 1}, {PushMeta: meta("b", 0, 3), RecvNanos: 2}}
	rest := []Push{{PushMeta: meta("c", 0, 4), RecvNanos: 3, Grad: gradBytes([]float32{100, 100})}}
	a := h.apply(encodeGroup(group, gradBytes([]float32{1, 2}), rest))
	if len(a.Pushes) != 3 {
		t.Fatalf("%d results", len(a.Pushes))
	}
	for i, r := range a.Pushes {
		if !r.Applied || r.Err != nil || r.Worker != []clock.WorkerID{"a", "b", "c"}[i] {
			t.Fatalf("push %d: %+v", i, r)
		}
	}
	if p := h.f.Params(nil); p[0] != 10-101 || p[1] != 20-102 {
		t.Fatalf("θ = %v", p)
	}
	if st := h.f.Status(); st.Pushes != 3 || st.Samples != 9 {
		t.Fatalf("status %+v", st)
	}
	// The same group again: every push a duplicate, nothing changes.
	a = h.apply(encodeGroup(group, gradBytes([]float32{1, 2}), nil))
	for i, r := range a.Pushes {
		if !r.Duplicate || r.Applied || r.Err != nil {
			t.Fatalf("resent push %d: %+v", i, r)
		}
	}
}

// A group with one push the gate would not take applies nothing: the
// duplicate is reported as one, the others are sent back to be resent.
func TestFSMSummedGroupAllOrNothing(t *testing.T) {
	h := groupHarness(t)
	h.apply(encodePushes([]Push{{PushMeta: meta("a", 0, 1), Grad: gradBytes([]float32{0, 0})}}))
	before := h.f.Params(nil)
	for _, c := range []struct {
		name  string
		group []Push
	}{
		{"duplicate", []Push{{PushMeta: meta("a", 0, 1)}, {PushMeta: meta("b", 0, 1)}}},
		{"future", []Push{{PushMeta: meta("b", 0, 1)}, {PushMeta: meta("c", 3, 1)}}},
		{"unknown", []Push{{PushMeta: meta("zz", 0, 1)}, {PushMeta: meta("b", 0, 1)}}},
		{"same worker twice", []Push{{PushMeta: meta("b", 0, 1)}, {PushMeta: meta("b", 0, 1)}}},
	} {
		a := h.apply(encodeGroup(c.group, gradBytes([]float32{1, 1}), nil))
		for i, r := range a.Pushes {
			dup := c.name == "duplicate" && i == 0
			if r.Applied || r.Duplicate != dup || (!dup && !errors.Is(r.Err, ErrRegroup)) {
				t.Fatalf("%s: push %d: %+v", c.name, i, r)
			}
		}
	}
	if p := h.f.Params(nil); p[0] != before[0] || p[1] != before[1] || h.f.Status().Pushes != 1 {
		t.Fatalf("a refused group changed the state: θ %v, %+v", p, h.f.Status())
	}
	// A non-finite sum is refused for every push of the group, as one
	// push's non-finite gradient is.
	a := h.apply(encodeGroup([]Push{{PushMeta: meta("b", 0, 1)}, {PushMeta: meta("c", 0, 1)}}, gradBytes([]float32{1, float32(math.Inf(1))}), nil))
	for i, r := range a.Pushes {
		var rej *shardapi.RejectError
		if !errors.As(r.Err, &rej) || rej.Reason != shardapi.ReasonNonFinite {
			t.Fatalf("non-finite sum: push %d: %+v", i, r)
		}
	}
}

func TestDecodeGroupEntry(t *testing.T) {
	b, err := encodeGroup([]Push{{PushMeta: meta("a", 1, 2), RecvNanos: 5}, {PushMeta: meta("b", 3, 4)}}, []byte{1, 2, 3, 4}, []Push{{PushMeta: meta("c", 0, 0), Grad: []byte{9, 9}}})
	if err != nil {
		t.Fatal(err)
	}
	e, err := decodeEntry(b)
	if err != nil {
		t.Fatal(err)
	}
	if e.Summed != 2 || string(e.sum) != "\x01\x02\x03\x04" || len(e.Pushes) != 3 || e.Pushes[0].RecvNanos != 5 || e.Pushes[1].Iter != 3 || string(e.Pushes[2].Grad) != "\x09\x09" {
		t.Fatalf("decoded %+v", e)
	}
	// A group member carrying bytes of its own, or a group longer than the
	// entry, is refused.
	for _, h := range []entry{
		{Pushes: []Push{{Bytes: 2}}, Summed: 1, SumBytes: 2},
		{Pushes: []Push{{}}, Summed: 2, SumBytes: 2},
		{Pushes: []Push{{}}, Summed: 1, SumBytes: 0},
	} {
		b, _ := appendEntry(entryPush, h, 4)
		if _, err := decodeEntry(append(b, 0, 0, 0, 0)); !errors.Is(err, shardapi.ErrBadEntry) {
			t.Errorf("header %+v: %v", h, err)
		}
	}
}

// TestClusterSumsBatchedPushes: with one entry in flight at a time, pushes
// that arrive together are batched and summed into groups; every ack is
// applied once, the parameters equal a serial replay, the replicas agree.
func TestClusterSumsBatchedPushes(t *testing.T) {
	const n = 64
	c := newCluster(t, 5)
	c.cfg = func(id mesh.NodeID) Config {
		cfg := fastConfig(5, id)
		cfg.MaxInflightBatches = 1
		cfg.SumBatches = true
		return cfg
	}
	ids := nodeIDs(3)
	spec := shardapi.Spec{Shard: 5, Len: n, Policy: "ssp:2", Optimizer: shardapi.DefaultOptimizer()}
	theta0 := gradFor("init", 0, n)
	c.boot(ids, spec, theta0)
	workers := []clock.WorkerID{"w1", "w2", "w3", "w4", "w5", "w6"}
	acked := runWorkers(t, c, ids, workers, 30, n, nil)
	c.waitSame()
	leader := c.waitLeader("")
	checkLeaderReplay(t, c, leader, spec, theta0, acked)
	st := leader.Status()
	t.Logf("%d pushes in %d entries, %d of them summed", st.Service.ProposedPushes, st.Service.Batches, st.Service.SummedPushes)
	if st.Service.SummedPushes == 0 {
		t.Skip("no two pushes shared an entry: nothing was summed")
	}
}

// The leader's sum of a group equals, bit for bit, what the FSM computes
// from the same pushes with their own gradients, balance weights included.
func TestGroupSumMatchesSeparatePushes(t *testing.T) {
	for _, base := range []int64{0, 8} {
		spec := testSpec(3, "asp")
		spec.BalanceBase = base
		grads := [][]float32{{0.1, -0.2, 0.3}, {1e-3, 7, -0.5}, {3, 3, 3}}
		samples := []int64{4, 16, 8}
		var sep []Push
		var group []*ticket
		for i, w := range []clock.WorkerID{"a", "b", "c"} {
			sep = append(sep, Push{PushMeta: meta(w, 0, samples[i]), Grad: gradBytes(grads[i])})
		}
		for i := range sep {
			group = append(group, &ticket{Push: sep[i]})
		}
		var got [2][]float32
		for k := range got {
			h := newFSMHarness(t, spec, []float32{1, 2, 3})
			for _, w := range []clock.WorkerID{"a", "b", "c"} {
				h.apply(encodeWorker(entryAddWorker, w, 0))
			}
			if k == 0 {
				h.apply(encodePushes(sep))
			} else {
				h.apply(encodeGroup(sep, groupSum(group, 3, shardapi.FP32, base), nil))
			}
			got[k] = h.f.Params(nil)
		}
		if !reflect.DeepEqual(got[0], got[1]) {
			t.Errorf("base %d: separate %v, summed %v", base, got[0], got[1])
		}
	}
}

// gatedLog is a raft log store whose writes of a remove-worker entry wait
// until open is closed, signalling on stuck when one starts to.
type gatedLog struct {
	raft.LogStore
	stuck chan struct{}
	open  chan struct{}
	once  sync.Once
}

func (g *gatedLog) StoreLogs(logs []*raft.Log) error {
	for _, l := range logs {
		if l.Type == raft.LogCommand && len(l.Data) > 0 && entryKind(l.Data[0]) == entryRemoveWorker {
			g.once.Do(func() { close(g.stuck) })
			<-g.open
		}
	}
	return g.LogStore.StoreLogs(logs)
}

func (g *gatedLog) StoreLog(l *raft.Log) error { return g.StoreLogs([]*raft.Log{l}) }

// TestLeaderRegroupsASummedGroupItself: a group summed on the state the
// leader had applied meets, when it applies, an entry proposed before it
// that removed one of its workers. The FSM applies none of the group
// (ErrRegroup); the leader proposes the other worker's push again itself,
// which is applied and acknowledged without a resend, and the removed
// worker's push is refused as from an unknown worker.
func TestLeaderRegroupsASummedGroupItself(t *testing.T) {
	const n = 4
	c := newCluster(t, 9)
	g := &gatedLog{stuck: make(chan struct{}), open: make(chan struct{})}
	t.Cleanup(func() {
		select {
		case <-g.open:
		default:
			close(g.open)
		}
	})
	c.stores = func(id mesh.NodeID) *raftstore.Stores {
		s := raftstore.NewInmem()
		g.LogStore = s.Log
		s.Log = g
		return s
	}
	c.cfg = func(id mesh.NodeID) Config {
		cfg := fastConfig(9, id)
		cfg.MaxInflightBatches = 2
		cfg.BatchLinger = time.Second // until both pushes are in: the shard has two workers
		return cfg
	}
	ids := nodeIDs(1)
	spec := testSpec(n, "asp")
	spec.Shard = 9
	c.boot(ids, spec, make([]float32, n))
	leader := c.waitLeader("")
	a, b := c.client("a", ids), c.client("b", ids)
	for _, cl := range []*shardapi.Client{a, b} {
		if _, err := cl.AddWorker(context.Background(), 0); err != nil {
			t.Fatal(err)
		}
	}
	removed := make(chan error, 1)
	go func() { removed <- leader.RemoveWorker(context.Background(), "b") }()
	<-g.stuck // b's removal is proposed, not applied: the state still has b
	type result struct {
		rep shardapi.PushReply
		err error
	}
	got := map[string]chan result{"a": make(chan result, 1), "b": make(chan result, 1)}
	for w, cl := range map[string]*shardapi.Client{"a": a, "b": b} {
		go func() {
			rep, err := cl.Push(context.Background(), shardapi.Push{Iter: 0, Samples: 1, ComputeNs: 1, Payload: cl.Encode(gradFor(clock.WorkerID(w), 0, n), 1)})
			got[w] <- result{rep, err}
		}()
	}
	c.waitFor(10*time.Second, "a and b summed in one entry", func() bool {
		return leader.Status().Service.SummedPushes == 2
	})
	close(g.open)
	if err := <-removed; err != nil {
		t.Fatal(err)
	}
	ra, rb := <-got["a"], <-got["b"]
	if ra.err != nil || ra.rep.Retries != 0 || len(ra.rep.Params) != n {
		t.Errorf("a: %v, %d retries, %d parameters; want an OK with the slice and no resend", ra.err, ra.rep.Retries, len(ra.rep.Params))
	}
	wantReason(t, "b, removed", rb.err, shardapi.ReasonUnknownWorker)
	if rb.rep.Retries != 0 {
		t.Errorf("b resent its push %d times", rb.rep.Retries)
	}
	st := leader.Status()
	if st.Service.RegroupedPushes != 2 || st.Pushes != 1 {
		t.Errorf("regrouped %d pushes, applied %d; want 2 and a's alone", st.Service.RegroupedPushes, st.Pushes)
	}
}
