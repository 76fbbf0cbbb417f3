package worker

import (
	"context"
	"fmt"
	"math"
)

// InnerOptimizer is the optimizer of a round's local steps (the job's
// --inner-optimizer and --inner-lr).
type InnerOptimizer struct {
	Kind string  // "sgd" or "adam"
	LR   float64 // constant rate, > 0
}

// Adam's constants (Kingma and Ba's defaults).
const (
	adamBeta1 = 0.9
	adamBeta2 = 0.999
	adamEps   = 1e-8
)

// LocalRounds returns a [Compute] that takes a round's local steps itself
// over c, which computes gradients (h = 1): for a round of h > 1 steps it
// copies θ, and for each step loads the step's samples (c.Next with h =
// 1 at the step's position of the round), computes their gradient on the
// local copy and steps the copy with opt; then it hands over θ − θ_local,
// the round's pseudo-gradient. A round of h = 1 passes through: c's
// gradient. Adam's moments and step count carry over from round to round
// (as DiLoCo's inner AdamW state does); sgd keeps none. It holds two
// vectors of NumParams (the local copy; a step's gradient, whose buffer
// then carries the difference handed over), Adam two more.
func LocalRounds(c Compute, opt InnerOptimizer) (Compute, error) {
	switch {
	case opt.Kind != "sgd" && opt.Kind != "adam":
		return nil, fmt.Errorf("worker: inner optimizer %q unknown (known: sgd, adam)", opt.Kind)
	case !(opt.LR > 0) || math.IsInf(opt.LR, 0):
		return nil, fmt.Errorf("worker: inner learning rate %v must be positive and finite", opt.LR)
	}
	return &localRounds{Compute: c, opt: opt}, nil
}

type localRounds struct {
	Compute
	opt       InnerOptimizer
	n, h      int   // the round Next loaded
	pos       int64 // its position (< 0: c's own reading)
	local     []float32
	grad      []float32
	m, v      []float32 // Adam's moments
	adamSteps int
}

func (r *localRounds) Next(n, h int, pos int64) error {
	if h < 1 || n < h {
		return fmt.Errorf("worker: a round of %d samples in %d steps", n, h)
	}
	r.n, r.h, r.pos = n, h, pos
	if h == 1 {
		return r.Compute.Next(n, 1, pos)
	}
	return nil
}

func (r *localRounds) Gradient(ctx context.Context, theta []float32, lo, hi int, emit func(off int, v []float32)) (float64, error) {
	if r.h == 1 {
		return r.Compute.Gradient(ctx, theta, lo, hi, emit)
	}
	if lo != 0 || hi != r.n {
		return 0, fmt.Errorf("worker: a round of %d local steps is computed whole, not samples [%d, %d) of %d", r.h, lo, hi, r.n)
	}
	p := len(theta)
	if len(r.local) != p {
		r.local, r.grad = make([]float32, p), make([]float32, p)
	}
	copy(r.local, theta)
	var loss float64
	for k := range r.h {
		a, b := k*r.n/r.h, (k+1)*r.n/r.h
		pos := int64(-1)
		if r.pos >= 0 {
			pos = r.pos + int64(a)
		}
		if err := r.Compute.Next(b-a, 1, pos); err != nil {
			return 0, fmt.Errorf("round step %d of %d: %w", k+1, r.h, err)
		}
		clear(r.grad)
		l, err := r.Compute.Gradient(ctx, r.local, 0, b-a, func(off int, v []float32) { copy(r.grad[off:], v) })
		if err != nil {
			return 0, fmt.Errorf("round step %d of %d: %w", k+1, r.h, err)
		}
		loss += l
		r.step()
	}
	// Hand θ − θ_local over in pieces, as a gradient would be.
	const piece = 1 << 16
	for off := 0; off < p; off += piece {
		end := min(off+piece, p)
		d := r.grad[off:end]
		for i := range d {
			d[i] = theta[off+i] - r.local[off+i]
		}
		emit(off, d)
	}
	return loss / float64(r.h), nil
}

// step applies one inner step with r.grad to r.local.
func (r *localRounds) step() {
	lr := float32(r.opt.LR)
	if r.opt.Kind == "sgd" {
		for i, g := range r.grad {
			r.local[i] -= lr * g
		}
		return
	}
	if r.m == nil {
		r.m, r.v = make([]float32, len(r.local)), make([]float32, len(r.local))
	}
	r.adamSteps++
	t := float64(r.adamSteps)
	c1 := float32(1 - math.Pow(adamBeta1, t))
	c2 := float32(1 - math.Pow(adamBeta2, t))
	for i, g := range r.grad {
		m := adamBeta1*r.m[i] + (1-adamBeta1)*g
		v := adamBeta2*r.v[i] + (1-adamBeta2)*g*g
		r.m[i], r.v[i] = m, v
		r.local[i] -= lr * (m / c1) / (float32(math.Sqrt(float64(v/c2))) + adamEps)
	}
}
