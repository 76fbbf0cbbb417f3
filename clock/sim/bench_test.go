package sim

import (
	"fmt"
	"testing"
	"time"

	"dsspmesh/clock"
)

// BenchmarkRun reports the simulator's wall cost per push (ns/push) for
// the configuration of issue 17's target (1024 workers, dssp:3:12, jitter
// ±10%) and a few others. Each b.N is one full run of workers×iters pushes.
func BenchmarkRun(b *testing.B) {
	for _, c := range []struct {
		workers, iters int
		policy         string
	}{
		{1024, 1000, "dssp:3:12"},
		{1024, 1000, "ssp:3"},
		{1024, 1000, "asp"},
		{64, 10000, "dssp:3:12"},
	} {
		p, err := clock.ParsePolicy(c.policy)
		if err != nil {
			b.Fatal(err)
		}
		cfg := DefaultConfig()
		cfg.Workers, cfg.Iters = c.workers, c.iters
		cfg.Models = []Model{
			{Dist: Jitter, Mean: 100 * time.Millisecond, Spread: 0.1, Slowdown: 1},
			{Dist: Jitter, Mean: 100 * time.Millisecond, Spread: 0.1, Slowdown: 1},
			{Dist: Jitter, Mean: 100 * time.Millisecond, Spread: 0.1, Slowdown: 1},
			{Dist: Jitter, Mean: 100 * time.Millisecond, Spread: 0.1, Slowdown: 4},
		}
		b.Run(fmt.Sprintf("workers=%d/iters=%d/%s", c.workers, c.iters, c.policy), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Run(cfg, p); err != nil {
					b.Fatal(err)
				}
			}
			pushes := float64(b.N) * float64(c.workers) * float64(c.iters)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/pushes, "ns/push")
		})
	}
}
