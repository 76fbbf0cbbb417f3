package shard

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
	"time"

	"dsspmesh/clock"
	"dsspmesh/mesh"
	"dsspmesh/shardapi"
)

// runWorkers runs each worker from its start clock up to iteration iters−1
// (a common end, so nobody is left waiting on a finished worker), with
// a per-worker pause that makes them unequally fast, and returns the acked
// (worker, iter) pairs. It fails t if a worker's acked iterations go back.
func runWorkers(t *testing.T, c *cluster, ids []mesh.NodeID, workers []clock.WorkerID, iters int64, n int, onAck func()) map[pushKey]bool {
	t.Helper()
	var mu sync.Mutex
	acked := map[pushKey]bool{}
	var wg sync.WaitGroup
	// Add every worker before any pushes, so all start at clock 0.
	clients := make([]*shardapi.Client, len(workers))
	starts := make([]int64, len(workers))
	for k, w := range workers {
		clients[k] = c.client(w, ids)
		start, err := clients[k].AddWorker(context.Background(), 0)
		if err != nil {
			t.Fatal(err)
		}
		starts[k] = start
	}
	for k, w := range workers {
		cl, start := clients[k], starts[k]
		wg.Add(1)
		go func() {
			defer wg.Done()
			var params []float32
			for it := start; it < iters; it++ {
				time.Sleep(time.Duration(k) * 300 * time.Microsecond) // unequal speeds, not synchronisation
				p, err := cl.Push(context.Background(), shardapi.Push{Iter: it, Samples: 8, ComputeNs: 1000, Payload: cl.Encode(gradFor(w, it, n), 8), Into: params})
				if err != nil {
					t.Errorf("%s push %d: %v", w, it, err)
					return
				}
				params = p.Params
				mu.Lock()
				acked[pushKey{w, it}] = true
				mu.Unlock()
				if onAck != nil {
					onAck()
				}
			}
		}()
	}
	wg.Wait()
	return acked
}

// TestClusterMatchesGateAndSerialReplay: 3 replicas, 4 workers. Every gate
// decision equals clock.Gate's on the same sequence, the parameters equal a
// serial replay of the applied log, and the replicas are identical.
func TestClusterMatchesGateAndSerialReplay(t *testing.T) {
	const n = 64
	c := newCluster(t, 3)
	// Without the batch linger the workers drift apart and the gate holds
	// the fast ones; with it every round's four pushes share one entry and
	// the workers stay in step, so nobody is ever held.
	c.cfg = func(id mesh.NodeID) Config { cfg := fastConfig(3, id); cfg.BatchLinger = 0; return cfg }
	ids := nodeIDs(3)
	spec := shardapi.Spec{Shard: 3, Len: n, Policy: "dssp:1:3", Optimizer: shardapi.DefaultOptimizer()}
	theta0 := gradFor("init", 0, n)
	c.boot(ids, spec, theta0)
	workers := []clock.WorkerID{"w1", "w2", "w3", "w4"}
	acked := runWorkers(t, c, ids, workers, 40, n, nil)
	for _, w := range workers {
		if !acked[pushKey{w, 39}] {
			t.Fatalf("%s did not finish", w)
		}
	}
	hash := c.waitSame()
	leader := c.waitLeader("")
	log := checkLeaderReplay(t, c, leader, spec, theta0, acked)
	for id, l := range c.logs {
		if other := l.snapshot(); !reflect.DeepEqual(stripResults(other), stripResults(log)) {
			t.Errorf("%s applied a different sequence", id)
		}
	}
	st := leader.Status()
	t.Logf("state %x, %d pushes in %d batches, held %d, gate %+v", hash[:6], st.Service.ProposedPushes, st.Service.Batches, st.Service.Held, st.Gate)
	if st.Gate.Waits == 0 {
		t.Error("no push was ever held: the test does not exercise the gate")
	}
}

// stripResults drops the error values (pointer identity differs per replica).
func stripResults(log []shardapi.Applied) []shardapi.Applied {
	out := make([]shardapi.Applied, len(log))
	for i, a := range log {
		a.Pushes = append([]shardapi.PushResult(nil), a.Pushes...)
		for j := range a.Pushes {
			if a.Pushes[j].Err != nil {
				a.Pushes[j].Err = errors.New(a.Pushes[j].Err.Error())
			}
		}
		out[i] = a
	}
	return out
}

// TestRemoveDeadWorkerReleasesWaiters: under BSP, two workers wait on a
// third that never pushes; removing it releases them, and its later push is
// rejected as unknown.
func TestRemoveDeadWorkerReleasesWaiters(t *testing.T) {
	const n = 8
	c := newCluster(t, 4)
	ids := c.bootZeros(1, n, "bsp")
	dead := c.client("dead", ids)
	if _, err := dead.AddWorker(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	released := make(chan clock.WorkerID, 2)
	held := make([]time.Duration, 2)
	for i, w := range []clock.WorkerID{"a", "b"} {
		cl := c.client(w, ids)
		if _, err := cl.AddWorker(context.Background(), 0); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep, err := cl.Push(context.Background(), shardapi.Push{Iter: 0, Samples: 1, ComputeNs: 1, Payload: cl.Encode(gradFor(w, 0, n), 1)})
			if err != nil {
				t.Errorf("%s: %v", w, err)
			}
			held[i] = rep.Held
			released <- w
		}()
	}
	leader := c.replica(ids[0])
	c.waitFor(5*time.Second, "both pushes held", func() bool { return leader.Status().Held == 2 })
	select {
	case w := <-released:
		t.Fatalf("%s released while the dead worker holds it back", w)
	default:
	}
	if err := leader.RemoveWorker(context.Background(), "dead"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if len(released) != 2 {
		t.Fatalf("%d workers released", len(released))
	}
	for i, h := range held {
		if h <= 0 {
			t.Errorf("client %d: Held = %v after a held push", i, h)
		}
	}
	rep, err := dead.Push(context.Background(), shardapi.Push{Iter: 0, Samples: 1, ComputeNs: 1, Payload: dead.Encode(gradFor("dead", 0, n), 1)})
	var rej *shardapi.RejectError
	if !errors.As(err, &rej) || rej.Reason != shardapi.ReasonUnknownWorker {
		t.Fatalf("push of removed worker: %v", err)
	}
	if rep.Held != 0 {
		t.Errorf("a push never held counted %v held", rep.Held)
	}
}

// TestRejectedOverTheWire: a bad push reaches the client as a typed
// rejection, is counted and changes nothing; a follower redirects.
func TestRejectedOverTheWire(t *testing.T) {
	const n = 8
	c := newCluster(t, 5)
	ids := c.bootZeros(3, n, "ssp:2")
	leader := c.waitLeader("")
	// Order the replicas so the client tries a follower first.
	order := []mesh.NodeID{}
	for _, id := range ids {
		if id != leader.cfg.ID {
			order = append(order, id)
		}
	}
	order = append(order, leader.cfg.ID)
	cl := c.client("w", order)
	if _, err := cl.AddWorker(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	before := leader.FSM().Params(nil)
	bad := []struct {
		iter int64
		g    []float32
		want shardapi.Reason
	}{
		{0, make([]float32, n-1), shardapi.ReasonBadLength},
		{0, []float32{0, 0, float32(posInf()), 0, 0, 0, 0, 0}, shardapi.ReasonNonFinite},
		{3, make([]float32, n), shardapi.ReasonFuture},
	}
	for _, b := range bad {
		_, err := cl.Push(context.Background(), shardapi.Push{Iter: b.iter, Samples: 1, ComputeNs: 1, Payload: cl.Encode(b.g, 1)})
		var rej *shardapi.RejectError
		if !errors.As(err, &rej) || rej.Reason != b.want {
			t.Fatalf("want %s, got %v", b.want, err)
		}
	}
	if !reflect.DeepEqual(before, leader.FSM().Params(nil)) {
		t.Fatal("rejected pushes changed the parameters")
	}
	if _, err := cl.Push(context.Background(), shardapi.Push{Iter: 0, Samples: 1, ComputeNs: 1, Payload: cl.Encode(gradFor("w", 0, n), 1)}); err != nil {
		t.Fatal(err)
	}
	if st := leader.Status(); st.Service.Rejected != 3 || st.Pushes != 1 {
		t.Fatalf("leader counted %d rejections, %d pushes", st.Service.Rejected, st.Pushes)
	}
	var nl int
	for _, r := range c.live() {
		nl += int(r.Status().Service.NotLeader)
	}
	if nl == 0 {
		t.Fatal("no follower redirected the client")
	}
	// Over the wire too, AddWorker aligns: from a higher clock it
	// advances the worker there (w is at 1 after its push).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if clk, err := cl.AddWorker(ctx, 4); err != nil || clk != 4 {
		t.Fatalf("AddWorker from 4: clock %d, %v; want 4", clk, err)
	}
	if _, err := cl.Push(ctx, shardapi.Push{Iter: 4, Samples: 1, ComputeNs: 1, Payload: cl.Encode(gradFor("w", 4, n), 1)}); err != nil {
		t.Fatalf("push at the advanced clock: %v", err)
	}
}

// TestSlowEntrySendsPending: while a push's entry takes longer to apply
// than the client's ReplyTimeout (a large entry replicating on a loaded
// machine), the leader sends Pending keep-alives, so the client waits on
// the same stream instead of presuming the leader dead and resending.
func TestSlowEntrySendsPending(t *testing.T) {
	const n = 8
	c := newCluster(t, 6)
	ids := c.bootZeros(1, n, "asp")
	leader := c.waitLeader("")
	cl := c.client("w", ids) // ReplyTimeout 500ms, HeldKeepAlive 50ms
	if _, err := cl.AddWorker(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	// The push's Apply blocks until the leader has sent more Pending
	// frames than fit in the client's ReplyTimeout.
	release := make(chan struct{})
	l := c.logs[leader.cfg.ID]
	l.mu.Lock()
	l.hold = func(a shardapi.Applied) {
		if a.Kind == "push" {
			<-release
		}
	}
	l.mu.Unlock()
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before the cluster's cleanup stops the replica
	go func() {
		defer free()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for range tick.C {
			if leader.cnt.pendingFrames.Load() >= 20 {
				return
			}
		}
	}()
	rep, err := cl.Push(context.Background(), shardapi.Push{Iter: 0, Samples: 1, ComputeNs: 1, Payload: cl.Encode(gradFor("w", 0, n), 1)})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Retries != 0 {
		t.Errorf("client resent the push %d times while its entry was applying", rep.Retries)
	}
	if st := leader.Status(); st.Service.ProposedPushes != 1 || st.Pushes != 1 {
		t.Errorf("leader proposed %d pushes, applied %d; want 1, 1", st.Service.ProposedPushes, st.Pushes)
	}
}

func posInf() float64 { return 1 / zero() }
func zero() float64   { return rand.Float64() * 0 }
