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
// gradient. A round split once at a step boundary (the pipelined loop:
// samples [0, a) while the push before is in flight, on the θ before it,
// then [a, n) on the θ it brought) carries the first steps' progress Δ_a
// onto the new θ — the remaining steps start from θ_new − Δ_a — and the
// second call hands over the whole round's θ_new − θ_local; the first
// call's Δ_a is handed over too, and a caller that mixes the two parts
// must take the second alone. Adam's moments and step count carry over from round to round
// (as DiLoCo's inner AdamW state does); sgd keeps none. It holds one
// vector of NumParams, the local copy, over a c that is [InPlace] (each
// step taken piece by piece as c hands the gradient out), two otherwise
// (a step's gradient); Adam two more.
func LocalRounds(c Compute, opt InnerOptimizer) (Compute, error) {
	switch {
	case opt.Kind != "sgd" && opt.Kind != "adam":
		return nil, fmt.Errorf("worker: inner optimizer %q unknown (known: sgd, adam)", opt.Kind)
	case !(opt.LR > 0) || math.IsInf(opt.LR, 0):
		return nil, fmt.Errorf("worker: inner learning rate %v must be positive and finite", opt.LR)
	}
	return &localRounds{Compute: c, opt: opt, inPlace: inPlace(c)}, nil
}

type localRounds struct {
	Compute
	opt       InnerOptimizer
	n, h      int   // the round Next loaded
	pos       int64 // its position (< 0: c's own reading)
	inPlace   bool  // c is InPlace: steps are taken as the gradient forms
	local     []float32
	grad      []float32 // a step's gradient (not InPlace)
	piece     []float32 // the difference handed over, a piece at a time
	ahead     []float32 // a split round's first steps' progress (Gradient)
	done      int       // the steps of the round taken
	m, v      []float32 // Adam's moments
	adamSteps int
	c1, c2    float32 // Adam's bias corrections of the step being taken
}

func (r *localRounds) Next(n, h int, pos int64) error {
	if h < 1 || n < h {
		return fmt.Errorf("worker: a round of %d samples in %d steps", n, h)
	}
	r.n, r.h, r.pos, r.done = n, h, pos, 0
	if h == 1 {
		return r.Compute.Next(n, 1, pos)
	}
	return nil
}

func (r *localRounds) Gradient(ctx context.Context, theta []float32, lo, hi int, emit func(off int, v []float32)) (float64, error) {
	if r.h == 1 {
		return r.Compute.Gradient(ctx, theta, lo, hi, emit)
	}
	kLo, okLo := r.stepAt(lo)
	kHi, okHi := r.stepAt(hi)
	switch {
	case !okLo || !okHi || lo > hi || hi != r.n && lo != 0:
		return 0, fmt.Errorf("worker: a round of %d local steps over %d samples is computed whole or split once at a step boundary, not samples [%d, %d)", r.h, r.n, lo, hi)
	case lo > 0 && r.done != kLo:
		return 0, fmt.Errorf("worker: a round's steps from %d on asked for before its first %d (%d taken)", kLo, kLo, r.done)
	}
	p := len(theta)
	if len(r.local) != p {
		r.local = make([]float32, p)
		if !r.inPlace {
			r.grad = make([]float32, p)
		}
	}
	if lo == 0 {
		copy(r.local, theta)
	} else {
		// The round's first steps ran from the θ before (their progress
		// in r.ahead): carry it onto this θ, so the pseudo-gradient handed
		// over is this round's progress from the θ it starts from now.
		for i := range r.local {
			r.local[i] = theta[i] - r.ahead[i]
		}
	}
	var loss float64
	for k := kLo; k < kHi; k++ {
		a, b := k*r.n/r.h, (k+1)*r.n/r.h
		pos := int64(-1)
		if r.pos >= 0 {
			pos = r.pos + int64(a)
		}
		if err := r.Compute.Next(b-a, 1, pos); err != nil {
			return 0, fmt.Errorf("round step %d of %d: %w", k+1, r.h, err)
		}
		r.beginStep()
		var (
			l   float64
			err error
		)
		if r.inPlace {
			l, err = r.Compute.Gradient(ctx, r.local, 0, b-a, r.stepPiece)
		} else {
			clear(r.grad)
			l, err = r.Compute.Gradient(ctx, r.local, 0, b-a, func(off int, v []float32) { copy(r.grad[off:], v) })
			if err == nil {
				r.stepPiece(0, r.grad)
			}
		}
		if err != nil {
			return 0, fmt.Errorf("round step %d of %d: %w", k+1, r.h, err)
		}
		loss += l
	}
	r.done = kHi
	// Hand θ − θ_local over in pieces, as a gradient would be.
	const piece = 1 << 16
	if r.piece == nil {
		r.piece = make([]float32, piece)
	}
	for off := 0; off < p; off += piece {
		end := min(off+piece, p)
		d := r.piece[:end-off]
		for i := range d {
			d[i] = theta[off+i] - r.local[off+i]
		}
		if hi < r.n {
			if r.ahead == nil {
				r.ahead = make([]float32, p)
			}
			copy(r.ahead[off:end], d)
		}
		emit(off, d)
	}
	if kHi == kLo {
		return 0, nil
	}
	return loss / float64(kHi-kLo), nil
}

// stepAt is the step whose first sample is sample i of the round (the
// round's end: h), and whether i is such a boundary.
func (r *localRounds) stepAt(i int) (int, bool) {
	if i == r.n {
		return r.h, true
	}
	k := i * r.h / r.n
	for k*r.n/r.h < i {
		k++
	}
	return k, k*r.n/r.h == i
}

// Boundary is the start of the step of a round of n samples in h steps
// nearest to sample i: where a pipelined loop may split the round (the
// first part computed while the push before is in flight).
func Boundary(n, h, i int) int {
	if h <= 1 {
		return i
	}
	k := (i*h + n/2) / n
	return min(k, h) * n / h
}

// beginStep readies one inner step: Adam's moments and bias corrections.
func (r *localRounds) beginStep() {
	if r.opt.Kind != "adam" {
		return
	}
	if r.m == nil {
		r.m, r.v = make([]float32, len(r.local)), make([]float32, len(r.local))
	}
	r.adamSteps++
	t := float64(r.adamSteps)
	r.c1 = float32(1 - math.Pow(adamBeta1, t))
	r.c2 = float32(1 - math.Pow(adamBeta2, t))
}

// stepPiece applies the inner step to values off … off+len(g)−1 of
// r.local, whose gradient is g.
func (r *localRounds) stepPiece(off int, g []float32) {
	lr := float32(r.opt.LR)
	local := r.local[off : off+len(g)]
	if r.opt.Kind == "sgd" {
		for i, gi := range g {
			local[i] -= lr * gi
		}
		return
	}
	ms, vs := r.m[off:off+len(g)], r.v[off:off+len(g)]
	for i, gi := range g {
		m := adamBeta1*ms[i] + (1-adamBeta1)*gi
		v := adamBeta2*vs[i] + (1-adamBeta2)*gi*gi
		ms[i], vs[i] = m, v
		local[i] -= lr * (m / r.c1) / (float32(math.Sqrt(float64(v/r.c2))) + adamEps)
	}
}
