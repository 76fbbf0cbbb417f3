package worker

import (
	"fmt"
	"math"
)

// Own is a built-in worker's own optimizer under the combine rule mean
// (job.CombineMean; docs/design.md, "The combine rule"): every push of
// one step carries the change one step of it makes, Δ = lr·v with v =
// μ·v + g (sgd: Δ = lr·g), g the batch's mean gradient (under
// --pipeline's split, the two parts mixed first), and the shards apply
// the mean of the workers' Δ. The zero Own (Kind "") pushes gradients:
// the combine rule sum, the shards stepping their optimizer. Rounds of
// local steps (LocalRounds) never use it: a round's pseudo-gradient is
// the change already.
//
// The velocity is the worker's and is not rolled back: a gradient the
// shards refuse (an outlier) or the pipelined loop drops has entered it,
// one step's worth; a gradient holding a NaN or ±Inf (pushed as it is,
// for the shards to refuse) zeroes it, so the next step starts clean.
type Own struct {
	Kind     string // "sgd" or "momentum"; "": none
	Momentum float64
	// Rate is the learning rate after samples applied mesh-wide (the
	// newest count an OK brought: shardapi.Version.Samples), the job's
	// schedule. Required when Kind is set.
	Rate func(samples int64) float64
}

// On reports whether o is set.
func (o Own) On() bool { return o.Kind != "" }

func (o Own) validate() error {
	switch {
	case !o.On():
		return nil
	case o.Kind != "sgd" && o.Kind != "momentum":
		return fmt.Errorf("worker: own optimizer %q unknown (known: sgd, momentum)", o.Kind)
	case o.Rate == nil:
		return fmt.Errorf("worker: own optimizer %s without a rate", o.Kind)
	case o.Kind == "sgd" && o.Momentum != 0, !(o.Momentum >= 0 && o.Momentum < 1):
		return fmt.Errorf("worker: own optimizer %s with momentum %v", o.Kind, o.Momentum)
	}
	return nil
}

// ownStep is an Own's state over one worker's life.
type ownStep struct {
	Own
	vel    []float32 // momentum only
	lr, mu float32
	bad    bool // a non-finite gradient in the step under way
}

// begin readies a step of a vector of p values after samples mesh-wide.
func (o *ownStep) begin(p int, samples int64) {
	if o.Kind == "momentum" && len(o.vel) != p {
		o.vel = make([]float32, p)
	}
	o.lr, o.mu, o.bad = float32(o.Rate(samples)), float32(o.Momentum), false
}

// piece turns the gradient g of values off … off+len(g)−1 into the step's
// change there, in place. Each product is rounded to float32 as written.
func (o *ownStep) piece(off int, g []float32) {
	lr := o.lr
	if o.vel == nil {
		for i, gi := range g {
			o.bad = o.bad || nonFinite(gi)
			g[i] = lr * gi
		}
		return
	}
	vel, mu := o.vel[off:off+len(g)], o.mu
	for i, gi := range g {
		o.bad = o.bad || nonFinite(gi)
		v := float32(mu*vel[i]) + gi
		vel[i] = v
		g[i] = lr * v
	}
}

// end closes the step: a non-finite gradient zeroes the velocity.
func (o *ownStep) end() {
	if o.bad {
		clear(o.vel)
	}
}

func nonFinite(x float32) bool { return math.Float32bits(x)&0x7f800000 == 0x7f800000 }
