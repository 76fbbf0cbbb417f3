package sim

import (
	"math/rand/v2"
	"testing"
)

// TestCalendarQueueMatchesHeap drives the calendar queue and the heap with
// the same operations, the simulator's (pop, queue the popped worker or
// idle ones again at or after the current time) with times drawn to hit
// ties, empty stretches, the far heap and wrap-arounds, and checks
// they pop the same events in the same order.
func TestCalendarQueueMatchesHeap(t *testing.T) {
	const workers = 200
	for _, c := range []struct {
		gap, horizon float64
		spread       int64 // delays are drawn in [1, spread]
		ties         bool  // delays from a handful of values
	}{
		{100, 10000, 5000, false},
		{100, 1000, 50000, false}, // most events beyond the window
		{1, 64, 3, true},
		{64, 4096, 1000, true},
		{1 << 20, 1 << 22, 1 << 10, false}, // many events a slot
		{1000, 4096, 1 << 30, false},       // sparse: the ring often empty
	} {
		rng := rand.New(rand.NewPCG(1, uint64(c.spread)))
		delay := func() int64 {
			if c.ties {
				return 1 + rng.Int64N(3)*c.spread
			}
			return 1 + rng.Int64N(c.spread)
		}
		cq, hq := newCalendarQueue(workers, c.gap, c.horizon), &eventQueue{}
		var idle []int32
		for i := range int32(workers) {
			e := event{at: delay(), worker: i}
			cq.push(e)
			hq.push(e)
		}
		for step := range 30000 {
			if cq.len() != hq.len() {
				t.Fatalf("step %d: len %d, heap %d", step, cq.len(), hq.len())
			}
			if hq.len() == 0 {
				break
			}
			got, want := cq.top(), hq.top()
			if got.at != want.at || got.worker != want.worker {
				t.Fatalf("gap %g step %d: top %+v, heap %+v", c.gap, step, got, want)
			}
			if rng.IntN(10) < 6 {
				e := event{at: want.at + delay(), worker: want.worker}
				cq.pop()
				cq.push(e)
				hq.replaceTop(e)
				continue
			}
			if p := cq.pop(); p.at != want.at || p.worker != want.worker {
				t.Fatalf("step %d: pop %+v, top was %+v", step, p, want)
			}
			hq.pop()
			idle = append(idle, want.worker)
			// Release a few idle workers at the current time, as a sweep
			// does.
			for k := rng.IntN(4); k > 0 && len(idle) > 0; k-- {
				j := rng.IntN(len(idle))
				e := event{at: want.at + delay(), worker: idle[j]}
				idle[j] = idle[len(idle)-1]
				idle = idle[:len(idle)-1]
				cq.push(e)
				hq.push(e)
			}
		}
	}
}

// BenchmarkCalendarQueue is one pop and one push of the popped worker
// about one mean round later, for 1024 workers as in issue 17's run.
func BenchmarkCalendarQueue(b *testing.B) {
	const workers = 1024
	rng := rand.New(rand.NewPCG(1, 2))
	q := newCalendarQueue(workers, 1e8/workers, 2e8)
	for i := range int32(workers) {
		q.push(event{at: 9e7 + rng.Int64N(2e7), worker: i})
	}
	delays := make([]int64, 4096)
	for k := range delays {
		delays[k] = 9e7 + rng.Int64N(2e7)
	}
	k := 0
	for b.Loop() {
		ev := q.pop()
		q.push(event{at: ev.at + delays[k&4095], worker: ev.worker})
		k++
	}
}
