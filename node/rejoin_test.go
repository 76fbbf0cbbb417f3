package node_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"dsspmesh/clock"
	"dsspmesh/internal/testlogger"
	"dsspmesh/internal/wait"
	"dsspmesh/mesh"
	"dsspmesh/node"
	"dsspmesh/node/assemble"
	"dsspmesh/node/job"
	"dsspmesh/node/shards"
	"dsspmesh/shardapi"
)

// A worker declared dead by mistake on one shard and re-added there two
// iterations ahead — the other worker went on there without it — must not
// push its gradient at that clock inside the push still going to the other
// shard. Under bsp that push would wait for the other worker's next
// iteration on the first shard, which waits on the second shard for this
// worker's next iteration, which waits for the push: the cycle that
// stalled a bsp mesh for minutes after a healed partition. pushAll fetches
// the first shard's slice instead and returns, and align then moves the
// second shard up, which releases the other worker.
func TestWorkerReaddedAheadDoesNotWaitAtTheGate(t *testing.T) {
	const n = 64
	log := testlogger.New(t, slog.LevelWarn)
	net := mesh.NewInmemNetwork()
	resolve := func(id mesh.NodeID) (string, error) { return string(id), nil }
	transport := func(id mesh.NodeID) mesh.Transport {
		tr, err := net.NewTransport(id, string(id), mesh.DefaultFrameLimits())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		return tr
	}
	spec := job.DefaultSpec()
	spec.WirePrecision = "fp32"
	hosts := []mesh.NodeID{"host0", "host1"}
	reps := make([]shards.Replica, len(hosts))
	for s, host := range hosts {
		opener := &assemble.RaftReplicas{DataDir: t.TempDir(), Transport: transport(host), Resolve: resolve, Logger: log, FixedTiming: true}
		rep, err := opener.Open(uint32(s), shards.ReplicaHooks{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rep.Shutdown() })
		if err := rep.Bootstrap([]mesh.NodeID{host}); err != nil {
			t.Fatal(err)
		}
		if err := wait.Until(context.Background(), 10*time.Second, "a leader", rep.IsLeader); err != nil {
			t.Fatal(err)
		}
		sp := shardapi.Spec{Shard: uint32(s), Len: n, Policy: "bsp", Optimizer: shardapi.DefaultOptimizer(), Precision: spec.Precision()}
		if err := rep.Init(context.Background(), sp, make([]float32, n)); err != nil {
			t.Fatal(err)
		}
		reps[s] = rep
	}
	clients := func(id clock.WorkerID, tr mesh.Transport) []*shardapi.Client {
		var cs []*shardapi.Client
		for s, host := range hosts {
			cfg := shardapi.DefaultClientConfig(uint32(s), id, func() []mesh.NodeID { return []mesh.NodeID{host} })
			cfg.Precision = spec.Precision()
			c, err := shardapi.NewClient(cfg, tr, resolve, log)
			if err != nil {
				t.Fatal(err)
			}
			cs = append(cs, c)
		}
		return cs
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// "fast" is driven here push by push; "w" is the worker under test.
	fast := clients("fast", transport("fast"))
	tr := transport("w")
	wClients := clients("w", tr)
	w := node.NewPushWorker(log, "w", tr, spec, [][2]int{{0, n}, {n, 2 * n}}, wClients)
	for _, cs := range [][]*shardapi.Client{fast, wClients} {
		for _, c := range cs {
			if _, err := c.AddWorker(ctx, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	grad := make([]float32, 2*n)
	for i := range grad {
		grad[i] = 0.01
	}
	push := func(s int, iter int64) error {
		_, err := fast[s].Push(ctx, shardapi.Push{Iter: iter, Samples: 1, ComputeNs: 1, Payload: fast[s].Encode(grad[:n], 1)})
		return err
	}

	// w is dropped from shard 0, where fast pushes 0 and 1 alone.
	if err := reps[0].RemoveWorker(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	for iter := range int64(2) {
		if err := push(0, iter); err != nil {
			t.Fatal(err)
		}
	}
	// On shard 1 fast pushes 0, held for w's 0, then, as a worker
	// does, 1, held for w's 1.
	fastDone := make(chan error, 1)
	go func() {
		err := push(1, 0)
		if err == nil {
			err = push(1, 1)
		}
		fastDone <- err
	}()

	payloads, err := w.Encode(grad)
	if err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 15*time.Second)
	defer pcancel()
	iters, got, unchecked, err := w.PushAll(pctx, 0, payloads)
	if err != nil {
		t.Fatalf("pushAll of iteration 0, re-added at shard 0's clock 2: %v (iterations %v)", err, iters)
	}
	if !slices.Equal(iters, []int64{2, 1}) {
		t.Fatalf("after the push w is at %v on the shards, want [2 1]", iters)
	}
	if !got[0] || !unchecked[0] {
		t.Errorf("shard 0's slice: fetched %v, unchecked %v; want a fetched slice marked unchecked", got[0], unchecked[0])
	}
	select {
	case err := <-fastDone:
		t.Fatalf("fast's push of 1 on shard 1 returned (%v) before w reached 2 there", err)
	default:
	}
	if iters, err = w.Align(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(iters, []int64{2, 2}) {
		t.Fatalf("after align w is at %v on the shards, want [2 2]", iters)
	}
	if err := <-fastDone; err != nil {
		t.Fatalf("fast's pushes on shard 1: %v", err)
	}
}
