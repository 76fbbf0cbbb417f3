package clock

import (
	"fmt"
	"testing"
	"time"
)

// pushLoop drives n workers through g for pushes pushes: ready workers are
// served in FIFO order, one push per 1000 ns; worker w000 is a 4× straggler
// (it re-enters the queue only after 3n other pushes), so the bounded
// paradigms hold workers and the controller runs.
func pushLoop(b *testing.B, g *Gate, n, pushes int) {
	ids := make([]WorkerID, n)
	queue := make([]WorkerID, 0, 2*n)
	for i := range ids {
		ids[i] = WorkerID(fmt.Sprintf("w%03d", i))
		if _, err := g.AddWorker(ids[i]); err != nil {
			b.Fatal(err)
		}
		queue = append(queue, ids[i])
	}
	type delayed struct {
		at int
		w  WorkerID
	}
	var slow []delayed
	requeue := func(step int, w WorkerID) {
		if w == ids[0] {
			slow = append(slow, delayed{step + 3*n, w})
			return
		}
		queue = append(queue, w)
	}
	for step := 0; step < pushes; step++ {
		if len(slow) > 0 && slow[0].at <= step || len(queue) == 0 {
			queue = append(queue, slow[0].w)
			slow = slow[1:]
		}
		w := queue[0]
		queue = queue[1:]
		iter, _ := g.Clock(w)
		out, err := g.Push(w, iter, int64(step)*1000)
		if err != nil {
			b.Fatal(err)
		}
		if out.Released {
			requeue(step, w)
		}
		for _, r := range out.Others {
			requeue(step, r.Worker)
		}
	}
}

// BenchmarkGatePush reports ns per push for each paradigm and, as
// x-asp, its cost over ASP's (measured in the same sub-benchmark on the
// same push count). The driver's own cost is in both.
func BenchmarkGatePush(b *testing.B) {
	for _, n := range []int{4, 64, 1024} {
		for _, text := range []string{"asp", "bsp", "ssp:3", "dssp:3:12", "dssp-paper:3:12"} {
			p, _ := ParsePolicy(text)
			b.Run(fmt.Sprintf("workers=%d/%s", n, text), func(b *testing.B) {
				base, _ := NewGate(Policy{Paradigm: ASP})
				start := time.Now()
				pushLoop(b, base, n, b.N)
				aspNs := float64(time.Since(start).Nanoseconds()) / float64(b.N)

				g, _ := NewGate(p)
				b.ResetTimer()
				pushLoop(b, g, n, b.N)
				b.StopTimer()
				ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
				b.ReportMetric(ns/aspNs, "x-asp")
			})
		}
	}
}
