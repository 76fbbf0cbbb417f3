package mesh

import (
	"context"
	"testing"
	"time"
)

// BenchmarkPushRPC1MiB measures push-sized RPCs (1 MiB payload, small
// reply) over the mesh transport against raw quic-go streams with the same
// TLS and QUIC settings, in the same run, and reports both rates and their
// ratio (target ≥ 0.8).
func BenchmarkPushRPC1MiB(b *testing.B) {
	const size = 1 << 20
	payload := make([]byte, size)
	sec := mustSecurity(b, mustKey(b))
	ctx := context.Background()

	// Raw quic-go: write 1 MiB, read an 8-byte ack.
	raw, err := NewRawQUIC(ctx, sec, DefaultTransportConfig("127.0.0.1:0"), size)
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	rawRPC := func() {
		if err := raw.RPC(); err != nil {
			b.Fatal(err)
		}
	}

	// Mesh transport: SendFrame 1 MiB, RecvFrame a small reply.
	server, client := newQUICNode(b, sec, "server"), newQUICNode(b, sec, "client")
	ch := Channel{Kind: KindRPC, Shard: 1}
	mln, err := server.Listen(ch)
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		s, err := mln.Accept(ctx)
		if err != nil {
			return
		}
		for {
			var h pushHeader
			if _, err := s.RecvFrame(&h); err != nil {
				return
			}
			if err := s.SendFrame(pushHeader{Type: "ok", Iter: h.Iter}, nil); err != nil {
				return
			}
		}
	}()
	ms, err := client.Dial(ctx, "server", server.Addr(), ch)
	if err != nil {
		b.Fatal(err)
	}
	var iter uint64
	meshRPC := func() {
		iter++
		if err := ms.SendFrame(pushHeader{Type: "push", Worker: "client", Iter: iter, Samples: 32}, payload); err != nil {
			b.Fatal(err)
		}
		var h pushHeader
		if _, err := ms.RecvFrame(&h); err != nil || h.Iter != iter {
			b.Fatalf("reply %+v %v", h, err)
		}
	}

	// Warm both (flow-control windows grow), then alternate rounds so that
	// both see the same machine load.
	for range 20 {
		rawRPC()
		meshRPC()
	}
	var rawTime, meshTime time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		rawRPC()
		t1 := time.Now()
		meshRPC()
		rawTime += t1.Sub(t0)
		meshTime += time.Since(t1)
	}
	b.StopTimer()
	mib := float64(b.N) * size / (1 << 20)
	rawRate, meshRate := mib/rawTime.Seconds(), mib/meshTime.Seconds()
	b.ReportMetric(rawRate, "raw-MiB/s")
	b.ReportMetric(meshRate, "mesh-MiB/s")
	b.ReportMetric(meshRate/rawRate, "ratio")
}
