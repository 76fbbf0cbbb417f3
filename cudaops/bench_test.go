package cudaops

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/gonum"
)

// BenchmarkSgemm times n×n×n SGEMM through the BLAS the CPU backend uses
// (OpenBLAS under -tags openblas, gonum otherwise; "backend") and, interleaved in the
// same run, gonum's pure-Go SGEMM as the baseline. Metrics: GFLOP/s of
// each and their ratio (backend/gonum; ~1 in the default build).
func BenchmarkSgemm(b *testing.B) {
	for _, n := range []int{256, 512, 1024} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 1))
			a, bb, c := randSlice(rng, n*n, 1), randSlice(rng, n*n, 1), make([]float32, n*n)
			active, base := blas32.Implementation(), gonum.Implementation{}
			var tActive, tBase time.Duration
			for b.Loop() {
				s := time.Now()
				active.Sgemm(blas.NoTrans, blas.NoTrans, n, n, n, 1, a, n, bb, n, 0, c, n)
				tActive += time.Since(s)
				s = time.Now()
				base.Sgemm(blas.NoTrans, blas.NoTrans, n, n, n, 1, a, n, bb, n, 0, c, n)
				tBase += time.Since(s)
			}
			flops := 2 * float64(n) * float64(n) * float64(n) * float64(b.N)
			b.ReportMetric(flops/tActive.Seconds()/1e9, "backend-GFLOP/s")
			b.ReportMetric(flops/tBase.Seconds()/1e9, "gonum-GFLOP/s")
			b.ReportMetric(tBase.Seconds()/tActive.Seconds(), "backend/gonum")
		})
	}
}

// BenchmarkTrainStep times one Gradient plus SGD step at batch 64 with the
// default ModelOptions (batch split across all CPUs with gonum, one
// goroutine with OpenBLAS) and, interleaved as the baseline, on one
// goroutine. Metrics: samples/s of each and the speed-up.
func BenchmarkTrainStep(b *testing.B) {
	const batch = 64
	for _, name := range ModelNames() {
		b.Run(name, func(b *testing.B) {
			par, err := NewModel(name, ModelOptions{})
			if err != nil {
				b.Fatal(err)
			}
			one, _ := NewModel(name, ModelOptions{Workers: 1})
			rng := rand.New(rand.NewPCG(2, 2))
			x := randSlice(rng, batch*par.InputSize(), 1)
			labels := make([]int, batch)
			for i := range labels {
				labels[i] = rng.IntN(par.Classes())
			}
			params := par.Init(1)
			grad, vel := make([]float32, len(params)), make([]float32, len(params))
			opt := SGD{LR: 1e-4, Momentum: 0.9}
			step := func(m *Model) time.Duration {
				s := time.Now()
				if _, err := m.Gradient(params, x, labels, grad); err != nil {
					b.Fatal(err)
				}
				opt.Step(nil, params, grad, vel)
				return time.Since(s)
			}
			var tPar, tOne time.Duration
			for b.Loop() {
				tPar += step(par)
				tOne += step(one)
			}
			samples := float64(batch * b.N)
			b.ReportMetric(samples/tPar.Seconds(), fmt.Sprintf("samples/s-%dworkers", par.Workers()))
			b.ReportMetric(samples/tOne.Seconds(), "samples/s-1thread")
			b.ReportMetric(tOne.Seconds()/tPar.Seconds(), "speedup")
		})
	}
}
