package shard

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"dsspmesh/clock"
	"dsspmesh/mesh"
	"dsspmesh/shardapi"
)

// TestSuspectedWorkerReadmitted: a worker stops pushing and disconnects
// while another is held behind it. The leader's check (driven here with an
// injected time, the periodic check off) suspends it only once it is
// overdue, the held worker is released by the replicated suspension, and
// when the suspended worker pushes again it is refused as unknown, added
// back at or past the clock it had, and goes on. The applied log replays
// through a fresh gate with every decision equal, no push applied twice,
// no release over s_U, on every replica.
func TestSuspectedWorkerReadmitted(t *testing.T) {
	const n = 8
	c := newCluster(t, 7)
	c.cfg = func(id mesh.NodeID) Config {
		cfg := fastConfig(7, id)
		cfg.Suspect.Off = true // the test drives the check
		return cfg
	}
	ids := nodeIDs(3)
	spec := shardapi.Spec{Shard: 7, Len: n, Policy: "ssp:1", Optimizer: shardapi.DefaultOptimizer()}
	theta0 := make([]float32, n)
	c.boot(ids, spec, theta0)
	ctx := context.Background()

	fast, slow := c.client("fast", ids), c.client("slow", ids)
	for _, cl := range []*shardapi.Client{fast, slow} {
		if _, err := cl.AddWorker(ctx, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := slow.Push(ctx, shardapi.Push{Iter: 0, Samples: 1, ComputeNs: 1, Payload: slow.Encode(gradFor("slow", 0, n), 1)}); err != nil {
		t.Fatal(err)
	}
	slow.Close() // it dies: no push, no stream
	// fast runs ahead until the gate holds it (gap > s_L = 1).
	for it := int64(0); it < 2; it++ {
		if _, err := fast.Push(ctx, shardapi.Push{Iter: it, Samples: 1, ComputeNs: 1, Payload: fast.Encode(gradFor("fast", it, n), 1)}); err != nil {
			t.Fatal(err)
		}
	}
	held := make(chan error, 1)
	go func() {
		_, err := fast.Push(ctx, shardapi.Push{Iter: 2, Samples: 1, ComputeNs: 1, Payload: fast.Encode(gradFor("fast", 2, n), 1)})
		held <- err
	}()
	l := c.waitLeader("")
	c.waitFor(10*time.Second, "fast held behind slow", func() bool { return l.FSM().gateWaiting("fast") })

	// Not overdue yet: nothing suspected.
	now := time.Now()
	if got := l.sus.suspects(now); len(got) != 0 {
		t.Fatalf("suspected %v at once", got)
	}
	// Overdue by far, and disconnected: slow (at t_min, clock 1) only.
	got := l.sus.suspects(now.Add(time.Hour))
	if len(got) != 1 || got[0].w != "slow" || got[0].clock != 1 {
		t.Fatalf("suspected %+v, want slow at clock 1", got)
	}
	l.sus.suspend(got[0])
	if err := <-held; err != nil {
		t.Fatalf("held push after the suspension: %v", err)
	}

	// slow was alive after all: refused as unknown, re-added, goes on.
	back := c.client("slow", ids)
	_, err := back.Push(ctx, shardapi.Push{Iter: 1, Samples: 1, ComputeNs: 1, Payload: back.Encode(gradFor("slow", 1, n), 1)})
	if !errors.Is(err, shardapi.ErrRejected) {
		t.Fatalf("push of a suspended worker: %v, want unknown-worker", err)
	}
	clk, err := back.AddWorker(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if clk < 1 {
		t.Fatalf("re-admitted at %d, below the clock it had (1)", clk)
	}
	if _, err := back.Push(ctx, shardapi.Push{Iter: clk, Samples: 1, ComputeNs: 1, Payload: back.Encode(gradFor("slow", clk, n), 1)}); err != nil {
		t.Fatal(err)
	}
	c.waitSame()
	for id, r := range c.live() {
		log := c.logs[id].snapshot()
		replay(t, log, spec, theta0)
		var suspended, kept int
		for _, a := range log {
			if a.Kind == "remove-worker" && a.Suspected {
				suspended++
			}
			if a.Kind == "suspect" {
				kept++
			}
		}
		if suspended != 1 || kept != 0 {
			t.Fatalf("%s: %d suspensions applied, %d without effect; want 1, 0", id, suspended, kept)
		}
		if w, ok := r.FSM().gateWorker("slow"); !ok || w.Clock != clk+1 {
			t.Fatalf("%s: slow at %+v, want clock %d", id, w, clk+1)
		}
	}
}

// TestSuspensionOfAWorkerThatMovedOnChangesNothing: a suspend entry
// proposed for a clock the worker has since left applies as "suspect"
// and leaves the gate as it was.
func TestSuspensionOfAWorkerThatMovedOnChangesNothing(t *testing.T) {
	f := NewFSM(1, nil)
	spec := shardapi.Spec{Shard: 1, Len: 2, Policy: "ssp:1", Optimizer: shardapi.DefaultOptimizer()}
	idx := uint64(0)
	apply := func(b []byte, err error) shardapi.Applied {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		idx++
		return f.Apply(raftLog(idx, b)).(shardapi.Applied)
	}
	apply(encodeInit(spec, make([]float32, 2)))
	apply(encodeWorker(entryAddWorker, "a", 0))
	apply(encodeWorker(entryAddWorker, "b", 0))
	if a := apply(encodeSuspend("a", 0)); a.Kind != "suspect" || a.Suspected {
		t.Fatalf("suspension with nobody held: %+v, want no effect", a)
	}
	if _, ok := f.gateWorker("a"); !ok {
		t.Fatal("a removed")
	}
	if a := apply(encodeSuspend("a", 5)); a.Kind != "suspect" {
		t.Fatalf("suspension at a clock a is not at: %+v", a)
	}
	if a := apply(encodeSuspend("zz", 0)); a.Kind != "suspect" {
		t.Fatalf("suspension of an unknown worker: %+v", a)
	}
}

func (f *FSM) gateWorker(w clock.WorkerID) (clock.WorkerInfo, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.st.gate.g == nil {
		return clock.WorkerInfo{}, false
	}
	return f.st.gate.g.Worker(w)
}

func (f *FSM) gateWaiting(w clock.WorkerID) bool {
	info, ok := f.gateWorker(w)
	return ok && info.Waiting
}

func raftLog(index uint64, data []byte) *raft.Log {
	return &raft.Log{Index: index, Type: raft.LogCommand, Data: data}
}
