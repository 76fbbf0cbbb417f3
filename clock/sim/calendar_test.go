package sim

import (
	"math/rand/v2"
	"testing"
)

// TestCalendarQueueMatchesHeap drives the calendar queue and the heap with
// the same operations, the simulator's (pop or replace the top, push at or
// after the current time) with times drawn to hit ties, empty stretches,
// the far heap and wrap-arounds, and checks they pop the same events.
func TestCalendarQueueMatchesHeap(t *testing.T) {
	for _, c := range []struct {
		gap, horizon float64
		spread       int64 // delays are drawn in [1, spread]
		ties         bool  // delays from a handful of values
	}{
		{100, 10000, 5000, false},
		{100, 1000, 50000, false}, // most events beyond the window
		{1, 64, 3, true},
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
		cq, hq := newCalendarQueue(c.gap, c.horizon), &eventQueue{}
		push := func(e event) { cq.push(e); hq.push(e) }
		for i := range 200 {
			push(event{at: delay(), worker: int32(i)})
		}
		for step := range 20000 {
			if cq.len() != hq.len() {
				t.Fatalf("step %d: len %d, heap %d", step, cq.len(), hq.len())
			}
			if hq.len() == 0 {
				break
			}
			got, want := cq.top(), hq.top()
			if got != want {
				t.Fatalf("gap %g step %d: top %+v, heap %+v", c.gap, step, got, want)
			}
			switch r := rng.IntN(10); {
			case r < 6:
				e := event{at: want.at + delay(), worker: want.worker}
				cq.replaceTop(e)
				hq.replaceTop(e)
			default:
				cq.pop()
				hq.pop()
				// Release a few at the current time, as a sweep does.
				for range rng.IntN(3) {
					push(event{at: want.at + delay(), worker: int32(rng.IntN(200))})
				}
			}
		}
	}
}
