package worker

import (
	"context"
	"math"
	"time"
)

// Emulation is what the lab asks of a worker's device that the device
// does not do: run slower (--slowdown, --compute-delay) or break now and
// then (the hidden --fault-nan-every). [Emulate] applies it around a
// [Compute]; the loop does not know it is there.
type Emulation struct {
	// Slowdown multiplies the compute time (1: none).
	Slowdown float64
	// Delay is the emulated accelerator time of a speed-1 worker for the
	// job's batch (Batch samples).
	Delay time.Duration
	Batch int
	// NaNEvery > 0 makes every NaNEvery-th gradient of a whole batch NaN:
	// a flaky accelerator, for the fault suite.
	NaNEvery int
}

// Emulate returns c with e applied, or c itself when e emulates nothing.
//
// The slowdown and the delay stretch only compute, never time spent
// waiting for others: after each Gradient it sleeps so that the call
// takes slowdown·(measured + delay·samples/Batch), so emulated compute
// grows with the batch as real compute does; the loop measures the call,
// and that stretched time is what its push reports as compute_ns. The
// poison counts the Gradient calls that end a batch (hi is the batch
// loaded by Next: one per iteration, the second part of a pipelined one)
// and makes every piece of the NaNEvery-th NaN.
func Emulate(c Compute, e Emulation) Compute {
	if (e.Slowdown == 1 || e.Slowdown == 0) && e.Delay <= 0 && e.NaNEvery <= 0 {
		return c
	}
	if e.Slowdown == 0 {
		e.Slowdown = 1
	}
	return &emulated{Compute: c, e: e}
}

type emulated struct {
	Compute
	e     Emulation
	batch int    // the batch Next loaded
	grads uint64 // whole-batch gradients computed
}

// Unwrap is the Compute emulated (for its ThetaHolder).
func (c *emulated) Unwrap() Compute { return c.Compute }

func (c *emulated) Next(n int, pos int64) error {
	c.batch = n
	return c.Compute.Next(n, pos)
}

func (c *emulated) Gradient(ctx context.Context, theta []float32, lo, hi int, emit func(off int, v []float32)) (float64, error) {
	poison := false
	if hi == c.batch {
		c.grads++
		poison = c.e.NaNEvery > 0 && c.grads%uint64(c.e.NaNEvery) == 0
	}
	start := time.Now()
	loss, err := c.Compute.Gradient(ctx, theta, lo, hi, func(off int, v []float32) {
		if poison {
			for i := range v {
				v[i] = float32(math.NaN()) // test fault: a flaky accelerator
			}
		}
		emit(off, v)
	})
	if err != nil {
		return 0, err
	}
	c.stretch(ctx, time.Since(start), hi-lo)
	return loss, nil
}

// stretch sleeps until a computation of samples that took measured has
// taken slowdown·(measured + delay·samples/Batch), or ctx ends.
func (c *emulated) stretch(ctx context.Context, measured time.Duration, samples int) {
	if extra := c.e.stretched(measured, samples) - measured; extra > 0 {
		t := time.NewTimer(extra)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
}

// stretched is the time a computation of samples that took measured is
// to take: slowdown·(measured + delay·samples/Batch).
func (e Emulation) stretched(measured time.Duration, samples int) time.Duration {
	delay := time.Duration(float64(e.Delay) * float64(samples) / float64(max(e.Batch, 1)))
	return time.Duration(float64(measured+delay) * e.Slowdown)
}
