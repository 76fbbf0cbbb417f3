package worker

import (
	"context"
	"math"
	"testing"
	"time"
)

// countCompute is a Compute whose gradient is one piece of ones.
type countCompute struct{ n int }

func (c *countCompute) NumParams() int               { return 4 }
func (c *countCompute) Next(n, _ int, _ int64) error { c.n = n; return nil }
func (c *countCompute) Gradient(_ context.Context, _ []float32, lo, hi int, emit func(int, []float32)) (float64, error) {
	emit(0, []float32{1, 1, 1, 1})
	return float64(hi - lo), nil
}

// TestEmulateNothing: without slowdown, delay or poison the compute is
// the one given, undecorated.
func TestEmulateNothing(t *testing.T) {
	c := &countCompute{}
	if got := Emulate(c, Emulation{Slowdown: 1, Batch: 32}); got != Compute(c) {
		t.Fatalf("Emulate wrapped a compute with nothing to emulate: %T", got)
	}
}

// TestEmulatePoison: every NaNEvery-th gradient of a whole batch is NaN;
// the part of a batch computed ahead (pipeline.go) is neither poisoned nor
// counted, so a pipelined and a lock-step worker poison the same
// iterations.
func TestEmulatePoison(t *testing.T) {
	c := Emulate(&countCompute{}, Emulation{Slowdown: 1, Batch: 8, NaNEvery: 3})
	grad := func(lo, hi int) bool {
		nan := false
		if _, err := c.Gradient(context.Background(), nil, lo, hi, func(_ int, v []float32) { nan = math.IsNaN(float64(v[0])) }); err != nil {
			t.Fatal(err)
		}
		return nan
	}
	var got []bool
	for range 6 {
		c.Next(8, 1, -1)
		grad(0, 3) // ahead
		got = append(got, grad(3, 8))
	}
	want := []bool{false, false, true, false, false, true}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("poisoned batches %v, want %v", got, want)
		}
	}
}

// TestStretched: slowdown·(measured + delay·samples/batch), so emulated
// compute grows with the batch as real compute does.
func TestStretched(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		e        Emulation
		measured time.Duration
		samples  int
		want     time.Duration
	}{
		{Emulation{Slowdown: 1, Batch: 32}, 10 * ms, 32, 10 * ms},
		{Emulation{Slowdown: 3, Batch: 32}, 10 * ms, 32, 30 * ms},
		{Emulation{Slowdown: 1, Delay: 40 * ms, Batch: 32}, 10 * ms, 32, 50 * ms},
		{Emulation{Slowdown: 2, Delay: 40 * ms, Batch: 32}, 10 * ms, 16, 60 * ms},
		{Emulation{Slowdown: 1, Delay: 40 * ms, Batch: 32}, 0, 64, 80 * ms},
	} {
		if got := c.e.stretched(c.measured, c.samples); got != c.want {
			t.Errorf("%+v, %v for %d samples: %v, want %v", c.e, c.measured, c.samples, got, c.want)
		}
	}
}
