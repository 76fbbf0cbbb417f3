package shard

import (
	"fmt"
	"math"
)

// OptimizerKind names the update rule.
type OptimizerKind uint8

const (
	SGD      OptimizerKind = iota + 1 // θ −= lr·g
	Momentum                          // v = μ·v + g; θ −= lr·v
)

func (k OptimizerKind) String() string {
	switch k {
	case SGD:
		return "sgd"
	case Momentum:
		return "momentum"
	}
	return fmt.Sprintf("optimizer(%d)", uint8(k))
}

// Optimizer is the update rule and its learning-rate schedule. The schedule
// is a function of the global samples applied to the shard, so every
// paradigm (and every replica) uses the same rate at the same progress.
type Optimizer struct {
	Kind     OptimizerKind `msgpack:"k"`
	Momentum float64       `msgpack:"m"` // μ for Momentum, 0 for SGD
	Schedule Schedule      `msgpack:"s"`
}

// Schedule is a step decay: lr = LR · Gamma^⌊samples / StepSamples⌋, constant
// when StepSamples is 0.
type Schedule struct {
	LR          float64 `msgpack:"lr"`
	Gamma       float64 `msgpack:"g"`
	StepSamples int64   `msgpack:"st"`
}

// DefaultOptimizer is momentum 0.9 at a constant 0.01.
func DefaultOptimizer() Optimizer {
	return Optimizer{Kind: Momentum, Momentum: 0.9, Schedule: Schedule{LR: 0.01, Gamma: 1}}
}

// Validate names the first bad value.
func (o Optimizer) Validate() error {
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case o.Kind != SGD && o.Kind != Momentum:
		return fmt.Errorf("shard: Optimizer.Kind %d is not sgd or momentum", o.Kind)
	case o.Kind == SGD && o.Momentum != 0:
		return fmt.Errorf("shard: Optimizer.Momentum %g must be 0 for sgd", o.Momentum)
	case !finite(o.Momentum) || o.Momentum < 0 || o.Momentum >= 1:
		return fmt.Errorf("shard: Optimizer.Momentum %g must be in [0, 1)", o.Momentum)
	case !finite(o.Schedule.LR) || o.Schedule.LR <= 0:
		return fmt.Errorf("shard: Schedule.LR %g must be positive", o.Schedule.LR)
	case !finite(o.Schedule.Gamma) || o.Schedule.Gamma <= 0 || o.Schedule.Gamma > 1:
		return fmt.Errorf("shard: Schedule.Gamma %g must be in (0, 1]", o.Schedule.Gamma)
	case o.Schedule.StepSamples < 0:
		return fmt.Errorf("shard: Schedule.StepSamples %d must not be negative", o.Schedule.StepSamples)
	}
	return nil
}

// Rate is the learning rate after samples global samples.
func (s Schedule) Rate(samples int64) float64 {
	if s.StepSamples == 0 || s.Gamma == 1 {
		return s.LR
	}
	return s.LR * math.Pow(s.Gamma, float64(samples/s.StepSamples))
}

// step applies one update with gradient g to theta (and velocity for
// Momentum). The explicit float32 conversions round each product, which
// stops the compiler from fusing multiply-adds on architectures that have
// FMA: every replica must compute the same bits.
func (o Optimizer) step(theta, velocity, g []float32, lr float64) {
	lr32 := float32(lr)
	if o.Kind == SGD {
		for i, gi := range g {
			theta[i] -= float32(lr32 * gi)
		}
		return
	}
	mu := float32(o.Momentum)
	for i, gi := range g {
		v := float32(mu*velocity[i]) + gi
		velocity[i] = v
		theta[i] -= float32(lr32 * v)
	}
}

// firstNonFinite returns the first index i at which step(theta, velocity,
// g, lr) would write a NaN or ±Inf into theta or velocity, or −1. It
// repeats step's arithmetic, so the answer is exact and the same on every
// replica.
func (o Optimizer) firstNonFinite(theta, velocity, g []float32, lr float64) int {
	lr32 := float32(lr)
	bad := func(x float32) bool { return math.Float32bits(x)&0x7f800000 == 0x7f800000 }
	if o.Kind == SGD {
		for i, gi := range g {
			if bad(theta[i] - float32(lr32*gi)) {
				return i
			}
		}
		return -1
	}
	mu := float32(o.Momentum)
	for i, gi := range g {
		v := float32(mu*velocity[i]) + gi
		if bad(v) || bad(theta[i]-float32(lr32*v)) {
			return i
		}
	}
	return -1
}
