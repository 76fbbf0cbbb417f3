package shard

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"dsspmesh/clock"
	"dsspmesh/mesh"
	"dsspmesh/shardapi"
)

// rawRate holds the push-and-pull rate (bytes/s each way) of the bare
// in-memory mesh transport per payload size, measured by the "raw"
// sub-benchmark that runs first in the same process.
var rawRate = map[int]float64{}

// BenchmarkShardPush measures pushes/s and MiB/s through one shard (4
// workers pushing concurrently, ASP so no reply is held) at 1 and 3
// replicas, 64 KiB and 1 MiB payloads, over mesh's in-memory transport and
// in-memory raft stores, and reports the ratio to the same transport's
// raw echo rate for the same payload, measured first in the same run.
func BenchmarkShardPush(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("raw/%dKiB", size>>10), func(b *testing.B) { benchRaw(b, size) })
		for _, replicas := range []int{1, 3} {
			b.Run(fmt.Sprintf("replicas=%d/%dKiB", replicas, size>>10), func(b *testing.B) { benchShard(b, replicas, size) })
		}
	}
}

func benchRaw(b *testing.B, size int) {
	net := mesh.NewInmemNetwork()
	srv, _ := net.NewTransport("srv", "srv", mesh.DefaultFrameLimits())
	cli, _ := net.NewTransport("cli", "cli", mesh.DefaultFrameLimits())
	defer srv.Close()
	defer cli.Close()
	ln, _ := srv.Listen(mesh.Channel{Kind: mesh.KindRPC, Shard: 1})
	go func() {
		for {
			s, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			go func() {
				for {
					var h shardapi.Request
					p, err := s.RecvFrame(&h)
					if err != nil {
						return
					}
					s.SendFrame(shardapi.Reply{Op: shardapi.OpPush, PushID: h.PushID, Status: shardapi.ReplyOK}, p)
				}
			}()
		}
	}()
	payload := make([]byte, size)
	b.SetBytes(int64(size))
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	per := (b.N + 3) / 4
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := cli.Dial(context.Background(), "srv", "srv", mesh.Channel{Kind: mesh.KindRPC, Shard: 1})
			if err != nil {
				b.Error(err)
				return
			}
			defer s.Close()
			for i := range per {
				if err := s.SendFrame(shardapi.Request{Op: shardapi.OpPush, PushMeta: shardapi.PushMeta{PushID: shardapi.PushID{Worker: clock.WorkerID(fmt.Sprint(w)), Iter: int64(i)}}}, payload); err != nil {
					b.Error(err)
					return
				}
				var rep shardapi.Reply
				if _, err := s.RecvFrame(&rep); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	rate := float64(4*per*size) / el.Seconds()
	rawRate[size] = rate
	b.ReportMetric(float64(4*per)/el.Seconds(), "pushes/s")
}

func benchShard(b *testing.B, replicas, size int) {
	n := size / 4
	c := newCluster(b, 9)
	c.logger = testLogger(b)
	ids := c.bootZeros(replicas, n, "asp")
	grad := make([]float32, n)
	for i := range grad {
		grad[i] = 1e-6
	}
	var clients []*shardapi.Client
	for w := range 4 {
		cl := c.client(clock.WorkerID(fmt.Sprint("w", w)), ids)
		if _, err := cl.AddWorker(context.Background(), 0); err != nil {
			b.Fatal(err)
		}
		clients = append(clients, cl)
	}
	b.SetBytes(int64(size))
	b.ResetTimer()
	start := time.Now()
	per := (b.N + 3) / 4
	var wg sync.WaitGroup
	for _, cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var params []float32
			for i := range per {
				p, err := cl.Push(context.Background(), shardapi.Push{Iter: int64(i), Samples: 1, ComputeNs: 1, Payload: cl.Encode(grad, 1), Into: params})
				if err != nil {
					b.Error(err)
					return
				}
				params = p.Params
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	pushes := float64(4 * per)
	b.ReportMetric(pushes/el.Seconds(), "pushes/s")
	if raw := rawRate[size]; raw > 0 {
		b.ReportMetric(pushes*float64(size)/el.Seconds()/raw, "x-raw")
	}
	st := c.waitLeader("").Status()
	b.ReportMetric(float64(st.Service.ProposedPushes)/float64(max(st.Service.Batches, 1)), "pushes/entry")
}

// BenchmarkDigest is the agreement check's digest of a shard's state (θ
// and the momentum velocity) on every replica, once per Config.CheckEvery
// entries: the MLP's 0.94 MB of parameters (one shard) and a 16 MiB slice.
func BenchmarkDigest(b *testing.B) {
	for _, n := range []int{235_146, 4 << 20} {
		b.Run(fmt.Sprintf("params=%d", n), func(b *testing.B) {
			spec := testSpec(n, "ssp:3")
			spec.Optimizer = shardapi.Optimizer{Kind: shardapi.Momentum, Momentum: 0.9, Schedule: shardapi.Schedule{LR: 0.01, Gamma: 1}}
			h := newFSMHarness(b, spec, make([]float32, n))
			b.SetBytes(int64(2 * 4 * n))
			for b.Loop() {
				if _, err := h.f.st.digest(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
