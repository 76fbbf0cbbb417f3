package sim

import (
	"fmt"
	"testing"
	"time"

	"dsspmesh/clock"
)

// BenchmarkRun reports the simulator's wall cost per push (ns/push) for
// the configuration of issue 17's target (`dssp-lab sim --workers 1024
// --paradigms dssp:3:12`: equal workers, jitter ±10%; "equal" below) and
// a few with every 4th worker 4× slower. Each b.N is one full run of
// workers×iters pushes.
func BenchmarkRun(b *testing.B) {
	for _, c := range []struct {
		workers, iters int
		policy         string
		equal          bool
	}{
		{1024, 2000, "dssp:3:12", true},
		{1024, 1000, "dssp:3:12", false},
		{1024, 1000, "ssp:3", false},
		{1024, 1000, "asp", false},
		{64, 10000, "dssp:3:12", false},
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
		name := fmt.Sprintf("workers=%d/iters=%d/%s", c.workers, c.iters, c.policy)
		if c.equal {
			cfg.Models, name = cfg.Models[:1], name+"/equal"
		}
		b.Run(name, func(b *testing.B) {
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
