package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"dsspmesh/cudaops"
	"dsspmesh/node/job"
)

// The go test benchmark set: `go test -run X -bench . ./lab/bench/` runs
// in well under a minute and prints each cost with its ratio to the
// baseline measured in the same benchmark. Each Measure call lasts seconds,
// so the framework runs it once (b.N = 1); the figures are the metrics,
// not ns/op. The process-mesh comparison needs the dssp binary and tens of
// seconds: it is only in `dssp-lab bench mesh`.

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// shardPayload is what a worker pushes to one shard of the default job.
func shardPayload(b *testing.B) int {
	spec := job.DefaultSpec()
	m, err := cudaops.NewModel(spec.Model, cudaops.ModelOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return (m.NumParams() + spec.Shards - 1) / spec.Shards * 4
}

// BenchmarkTransport: mesh QUIC frames vs raw quic-go, same TLS, one
// shard's push payload.
func BenchmarkTransport(b *testing.B) {
	payload := shardPayload(b)
	for range b.N {
		r, err := MeasureTransport(context.Background(), payload, 2*time.Second, quiet())
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(r.RawMiBs, "raw-MiB/s")
		b.ReportMetric(r.MeshMiBs, "mesh-MiB/s")
		b.ReportMetric(r.Ratio, "x-raw")
	}
}

// BenchmarkReplicatedPush: pushes through a shard at 1 and 3 replicas
// (QUIC, in-memory Raft stores) vs an unreplicated echo.
func BenchmarkReplicatedPush(b *testing.B) {
	cfg := DefaultReplicationConfig()
	cfg.Payload = shardPayload(b)
	cfg.Duration = 2 * time.Second
	for range b.N {
		r, err := MeasureReplication(context.Background(), cfg, quiet())
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(r.Baseline.PushesPerSec, "echo-pushes/s")
		for _, x := range r.Rates {
			b.ReportMetric(x.PushesPerSec, fmt.Sprintf("r%d-pushes/s", x.Replicas))
			b.ReportMetric(x.Ratio, fmt.Sprintf("r%d-x-echo", x.Replicas))
		}
	}
}

// BenchmarkGate: ns per push of each gate with a 4× straggler, and the
// ratio to ASP's.
func BenchmarkGate(b *testing.B) {
	for range b.N {
		costs, err := MeasureGate([]string{"bsp", "ssp:3", "dssp:3:12", "dssp-paper:3:12"}, 4, 200_000, []float64{1, 1, 2, 4})
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range costs {
			b.ReportMetric(c.NsPerOp, c.Policy+"-ns/push")
			if c.Policy != "asp" {
				b.ReportMetric(c.XASP, c.Policy+"-x-asp")
			}
		}
	}
}

// TestInprocIndependentWorkers: with Independent each worker trains its
// own copy of the model (the cores computing at once, bigmodel's second
// ceiling) and the run counts their iterations.
func TestInprocIndependentWorkers(t *testing.T) {
	spec := job.DefaultSpec()
	spec.Dataset = "synthetic-mnist"
	r, err := MeasureInproc(context.Background(), InprocConfig{Workers: 2, Threads: 1, Independent: true, Spec: spec, Duration: 300 * time.Millisecond, Warmup: 50 * time.Millisecond})
	if err != nil || r.Iters < 2 || r.ItersPerSec <= 0 {
		t.Fatalf("two independent workers: %+v, %v", r, err)
	}
}

// BenchmarkInprocIters: the no-network baseline of the iteration
// throughput comparison (4 goroutines, the job's model), on the synthetic
// MNIST-shaped set so it needs no download; compare it with a
// single-worker figure from the same run to see contention on the store.
func BenchmarkInprocIters(b *testing.B) {
	spec := job.DefaultSpec()
	spec.Dataset = "synthetic-mnist"
	for range b.N {
		one, err := MeasureInproc(context.Background(), InprocConfig{Workers: 1, Threads: 1, Spec: spec, Duration: 2 * time.Second, Warmup: 300 * time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		four, err := MeasureInproc(context.Background(), InprocConfig{Workers: 4, Threads: 1, Spec: spec, Duration: 2 * time.Second, Warmup: 300 * time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(one.ItersPerSec, "1w-iters/s")
		b.ReportMetric(four.ItersPerSec, "4w-iters/s")
		b.ReportMetric(four.ItersPerSec/one.ItersPerSec, "4w-x-1w")
	}
}
