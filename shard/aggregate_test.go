package shard

import (
	"errors"
	"math"
	"reflect"
	"testing"

	"dsspmesh/clock"
	"dsspmesh/mesh"
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
	if e.summed != 2 || string(e.sum) != "\x01\x02\x03\x04" || len(e.pushes) != 3 || e.pushes[0].RecvNanos != 5 || e.pushes[1].Iter != 3 || string(e.pushes[2].Grad) != "\x09\x09" {
		t.Fatalf("decoded %+v", e)
	}
	// A group member carrying bytes of its own, or a group longer than the
	// entry, is refused.
	for _, h := range []pushBatchHeader{
		{Pushes: []pushHeader{{Bytes: 2}}, Summed: 1, SumBytes: 2},
		{Pushes: []pushHeader{{}}, Summed: 2, SumBytes: 2},
		{Pushes: []pushHeader{{}}, Summed: 1, SumBytes: 0},
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
		var pend []*pending
		for i, w := range []clock.WorkerID{"a", "b", "c"} {
			sep = append(sep, Push{PushMeta: meta(w, 0, samples[i]), Grad: gradBytes(grads[i])})
			pend = append(pend, &pending{req: shardapi.Request{Op: shardapi.OpPush, PushMeta: meta(w, 0, samples[i])}, grad: gradBytes(grads[i])})
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
				h.apply(encodeGroup(sep, groupSum(pend, 3, shardapi.FP32, base), nil))
			}
			got[k] = h.f.Params(nil)
		}
		if !reflect.DeepEqual(got[0], got[1]) {
			t.Errorf("base %d: separate %v, summed %v", base, got[0], got[1])
		}
	}
}
