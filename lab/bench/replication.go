package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"dsspmesh/clock"
	"dsspmesh/internal/wait"
	"dsspmesh/mesh"
	"dsspmesh/node/assemble"
	"dsspmesh/node/shards"
	"dsspmesh/shardapi"
)

// ReplicationConfig is the replicated-push measurement: Workers concurrent
// workers push Payload-byte gradients for Duration to one shard under ASP
// (no reply held by the gate), over the QUIC transport, at each replica
// count; the baseline is an unreplicated echo of the same payload by the
// same number of workers over the same kind of transport (no Raft, no FSM),
// measured first in the same run.
type ReplicationConfig struct {
	Replicas []int
	Workers  int
	Payload  int // bytes of gradient per push (a multiple of 4), as fp32
	Duration time.Duration
	// Precision is the shard's wire precision: a push carries
	// Precision.Bytes(Payload/4) bytes. The echo always carries Payload.
	Precision shardapi.Precision
	// Dir, if set, holds raftstore's disk stores as a node keeps them;
	// empty means raftstore's in-memory stores.
	Dir string
}

// DefaultReplicationConfig is 1 and 3 replicas, 4 workers, 256 KiB, 8s
// each, in-memory stores.
func DefaultReplicationConfig() ReplicationConfig {
	return ReplicationConfig{Replicas: []int{1, 3}, Workers: 4, Payload: 256 << 10, Duration: 8 * time.Second}
}

// Validate names the first bad value.
func (c ReplicationConfig) Validate() error {
	switch {
	case len(c.Replicas) == 0:
		return errors.New("bench: no replica count to measure")
	case c.Workers < 1:
		return fmt.Errorf("bench: replication workers %d must be >= 1", c.Workers)
	case c.Payload < 4 || c.Payload%4 != 0:
		return fmt.Errorf("--payload %d must be a positive multiple of 4", c.Payload)
	case c.Duration <= 0:
		return fmt.Errorf("bench: replication duration %v must be > 0", c.Duration)
	}
	for _, r := range c.Replicas {
		if r < 1 || r > 7 {
			return fmt.Errorf("--replicas %d outside 1..7", r)
		}
	}
	return nil
}

// PushRate is one measured configuration.
type PushRate struct {
	Replicas      int // 0: the unreplicated baseline
	Pushes        int
	PushesPerSec  float64
	MiBs          float64 // gradient bytes pushed per second
	Ratio         float64 // MiBs over the baseline's
	PushesPerEntr float64 // pushes batched into one Raft entry
}

// ReplicationResult is the baseline and each replica count.
type ReplicationResult struct {
	Config   ReplicationConfig
	Baseline PushRate
	Rates    []PushRate
}

// MeasureReplication runs the baseline, then each replica count.
func MeasureReplication(ctx context.Context, cfg ReplicationConfig, log *slog.Logger) (ReplicationResult, error) {
	res := ReplicationResult{Config: cfg}
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	key, err := mesh.GenerateKey()
	if err != nil {
		return res, err
	}
	sec, err := mesh.NewSecurity(key)
	if err != nil {
		return res, err
	}
	if res.Baseline, err = measureEcho(ctx, sec, cfg, log); err != nil {
		return res, err
	}
	for _, n := range cfg.Replicas {
		r, err := measureShard(ctx, sec, cfg, n, log)
		if err != nil {
			return res, fmt.Errorf("bench: %d replicas: %w", n, err)
		}
		r.Ratio = r.MiBs / res.Baseline.MiBs
		res.Rates = append(res.Rates, r)
	}
	return res, nil
}

// measureEcho is the unreplicated baseline: each worker sends its payload
// on its own stream and the server answers with a small header, as a
// shard leader answers a push (the parameters it returns are the same size
// as the gradient, so the echo returns the payload too).
func measureEcho(ctx context.Context, sec *mesh.Security, cfg ReplicationConfig, log *slog.Logger) (PushRate, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration+30*time.Second)
	defer cancel()
	tcfg := mesh.DefaultTransportConfig("127.0.0.1:0")
	srv, err := newQUIC(sec, "echo", tcfg, log)
	if err != nil {
		return PushRate{}, err
	}
	defer srv.Close()
	cli, err := newQUIC(sec, "workers", tcfg, log)
	if err != nil {
		return PushRate{}, err
	}
	defer cli.Close()
	ch := mesh.Channel{Kind: mesh.KindRPC, Shard: 1}
	ln, err := srv.Listen(ch)
	if err != nil {
		return PushRate{}, err
	}
	go echo(ctx, ln, true)
	data := make([]byte, cfg.Payload)
	var streams []mesh.Stream
	for range cfg.Workers {
		s, err := cli.Dial(ctx, "echo", srv.Addr(), ch)
		if err != nil {
			return PushRate{}, err
		}
		defer s.Close()
		s.SetDeadline(time.Now().Add(cfg.Duration + 30*time.Second))
		streams = append(streams, s)
	}
	n, el, err := drive(ctx, cfg.Workers, cfg.Duration, func(w int, i int64) error {
		if err := streams[w].SendFrame(rpcHeader{Iter: uint64(i)}, data); err != nil {
			return err
		}
		var h rpcHeader
		_, err := streams[w].RecvFrame(&h)
		return err
	})
	if err != nil {
		return PushRate{}, err
	}
	return rate(0, n, el, cfg.Payload), nil
}

// measureShard boots an n-replica shard on n QUIC transports, adds the
// workers, each through its own client transport, and pushes.
func measureShard(ctx context.Context, sec *mesh.Security, cfg ReplicationConfig, n int, log *slog.Logger) (PushRate, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration+60*time.Second)
	defer cancel()
	const shardID = 7
	tcfg := mesh.DefaultTransportConfig("127.0.0.1:0")
	addrs := map[mesh.NodeID]string{}
	var mu sync.Mutex
	resolve := func(id mesh.NodeID) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if a, ok := addrs[id]; ok {
			return a, nil
		}
		return "", mesh.ErrNoRoute
	}
	var ids []mesh.NodeID
	var reps []shards.Replica
	var trs []*mesh.QUICTransport
	defer func() {
		for _, r := range reps {
			r.Shutdown()
		}
		for _, t := range trs {
			t.Close()
		}
	}()
	for i := range n {
		id := mesh.NodeID(fmt.Sprintf("replica%d", i))
		tr, err := newQUIC(sec, id, tcfg, log)
		if err != nil {
			return PushRate{}, err
		}
		trs = append(trs, tr)
		mu.Lock()
		addrs[id] = tr.Addr()
		mu.Unlock()
		ids = append(ids, id)
		// A node's replica wiring, with shard.DefaultConfig's timing (no
		// stretch for entry size or group count) and, without cfg.Dir,
		// in-memory raft stores.
		opener := &assemble.RaftReplicas{Transport: tr, Resolve: resolve, Logger: log, FixedTiming: true, InMemory: cfg.Dir == ""}
		if cfg.Dir != "" {
			dir, err := os.MkdirTemp(cfg.Dir, "replica-*")
			if err != nil {
				return PushRate{}, err
			}
			defer os.RemoveAll(dir)
			opener.DataDir = dir
		}
		rep, err := opener.Open(shardID, shards.ReplicaHooks{})
		if err != nil {
			return PushRate{}, err
		}
		reps = append(reps, rep)
	}
	if err := reps[0].Bootstrap(ids); err != nil {
		return PushRate{}, err
	}
	floats := cfg.Payload / 4
	spec := shardapi.Spec{Shard: shardID, Len: floats, Policy: "asp", Optimizer: shardapi.DefaultOptimizer(), Precision: cfg.Precision}
	// Init is ambiguous while leadership settles: retry on whichever
	// replica leads until one reports the shard initialised.
	var leader shards.Replica
	err := wait.Until(ctx, 30*time.Second, "the shard initialised", func() bool {
		for _, r := range reps {
			if r.IsLeader() {
				if !r.Status().Initialized {
					ictx, c := context.WithTimeout(ctx, 5*time.Second)
					r.Init(ictx, spec, make([]float32, floats))
					c()
				}
				leader = r
				return r.Status().Initialized
			}
		}
		return false
	})
	if err != nil {
		return PushRate{}, err
	}
	grad := make([]float32, floats)
	for i := range grad {
		grad[i] = 1e-6
	}
	var clients []*shardapi.Client
	params := make([][]float32, cfg.Workers)
	for w := range cfg.Workers {
		// One transport (one identity) per worker: a shard refuses a push
		// that names a worker other than the authenticated peer.
		id := mesh.NodeID(fmt.Sprintf("w%d", w))
		cli, err := newQUIC(sec, id, tcfg, log)
		if err != nil {
			return PushRate{}, err
		}
		trs = append(trs, cli)
		cc := shardapi.DefaultClientConfig(shardID, clock.WorkerID(id), func() []mesh.NodeID { return ids })
		cc.Precision = cfg.Precision
		c, err := shardapi.NewClient(cc, cli, resolve, log)
		if err != nil {
			return PushRate{}, err
		}
		defer c.Close()
		if _, err := c.AddWorker(ctx, 0); err != nil {
			return PushRate{}, fmt.Errorf("add worker: %w", err)
		}
		clients = append(clients, c)
	}
	before := leader.Status().Service
	cnt, el, err := drive(ctx, cfg.Workers, cfg.Duration, func(w int, i int64) error {
		c := clients[w]
		rep, err := c.Push(ctx, shardapi.Push{Iter: i, Samples: 1, ComputeNs: 1, Payload: c.Encode(grad, 1), Into: params[w]})
		params[w] = rep.Params
		return err
	})
	if err != nil {
		return PushRate{}, err
	}
	r := rate(n, cnt, el, cfg.Payload)
	after := leader.Status().Service
	if b := after.Batches - before.Batches; b > 0 {
		r.PushesPerEntr = float64(after.ProposedPushes-before.ProposedPushes) / float64(b)
	}
	return r, nil
}

// drive runs workers goroutines calling op(worker, iteration) in a loop
// for about d and returns the calls completed and the time taken.
func drive(ctx context.Context, workers int, d time.Duration, op func(w int, i int64) error) (int, time.Duration, error) {
	var done atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, workers)
	start := time.Now()
	end := start.Add(d)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int64(0); time.Now().Before(end) && ctx.Err() == nil; i++ {
				if err := op(w, i); err != nil {
					errs[w] = err
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	return int(done.Load()), time.Since(start), errors.Join(errs...)
}

func rate(replicas, n int, el time.Duration, payload int) PushRate {
	return PushRate{Replicas: replicas, Pushes: n, PushesPerSec: float64(n) / el.Seconds(),
		MiBs: float64(n) * float64(payload) / (1 << 20) / el.Seconds()}
}
