package node

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"dsspmesh/clock"
	"dsspmesh/internal/testlogger"
	"dsspmesh/internal/wait"
	"dsspmesh/mesh"
	"dsspmesh/raftstore"
	"dsspmesh/shard"
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
	spec := DefaultJobSpec()
	spec.WirePrecision = "fp32"
	hosts := []mesh.NodeID{"host0", "host1"}
	reps := make([]*shard.Replica, len(hosts))
	for s, host := range hosts {
		tr := transport(host)
		rt, err := raftstore.NewMeshTransport(tr, uint32(s), resolve, log)
		if err != nil {
			t.Fatal(err)
		}
		cfg := shard.DefaultConfig(uint32(s), host)
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
		cfg.BatchLinger = 0
		rep, err := shard.NewReplica(cfg, shard.Deps{Transport: tr, Resolve: resolve, RaftTransport: rt,
			Stores: raftstore.NewInmem(), Clock: shard.SystemClock{}, Logger: log})
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
	w := &worker{n: &Node{log: log, id: "w", tr: tr, obs: noObserver{}, metrics: NewMetrics(func() Status { return Status{} }),
		events: newEventLog(time.Now)}, spec: spec, bounds: [][2]int{{0, n}, {n, 2 * n}},
		theta: make([]float32, 2*n), iters: make([]int64, 2), reads: make([]SliceRead, 2), clients: clients("w", tr)}
	w.zero = zeroPayloads(w.newEncoders())
	for _, cs := range [][]*shardapi.Client{fast, w.clients} {
		for _, c := range cs {
			if _, err := c.AddWorker(ctx, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	grad := make([]float32, n)
	for i := range grad {
		grad[i] = 0.01
	}
	push := func(s int, iter int64) error {
		_, err := fast[s].Push(ctx, iter, 1, 1, grad, nil)
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

	enc := w.newEncoders()
	payloads := make([][]byte, len(enc))
	for s, e := range enc {
		e.Start(nil)
		e.Put(0, grad)
		var err error
		if payloads[s], err = e.Finish(); err != nil {
			t.Fatal(err)
		}
	}
	fl := w.newFlight(0, make([]float32, 2*n))
	fl.batch = 1
	pctx, pcancel := context.WithTimeout(ctx, 15*time.Second)
	defer pcancel()
	if err := w.pushAll(pctx, fl, payloads); err != nil {
		t.Fatalf("pushAll of iteration 0, re-added at shard 0's clock 2: %v (iterations %v)", err, w.iters)
	}
	if w.iters[0] != 2 || w.iters[1] != 1 {
		t.Fatalf("after the push w is at %v on the shards, want [2 1]", w.iters)
	}
	if !fl.got[0] || !fl.reads[0].Unchecked {
		t.Errorf("shard 0's slice: fetched %v, read %+v; want a fetched slice marked unchecked", fl.got[0], fl.reads[0])
	}
	select {
	case err := <-fastDone:
		t.Fatalf("fast's push of 1 on shard 1 returned (%v) before w reached 2 there", err)
	default:
	}
	if err := w.align(ctx, false); err != nil {
		t.Fatal(err)
	}
	if w.iters[0] != 2 || w.iters[1] != 2 {
		t.Fatalf("after align w is at %v on the shards, want [2 2]", w.iters)
	}
	if err := <-fastDone; err != nil {
		t.Fatalf("fast's pushes on shard 1: %v", err)
	}
}
