package shard

import "dsspmesh/shardapi"

import "math"

// step applies one update of o with gradient g to theta (and velocity for
// Momentum). The explicit float32 conversions round each product, which
// stops the compiler from fusing multiply-adds on architectures that have
// FMA: every replica must compute the same bits.
func step(o shardapi.Optimizer, theta, velocity, g []float32, lr float64) {
	lr32 := float32(lr)
	if o.Kind == shardapi.SGD {
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

// maxParamBits is the float32 bit pattern of 2^64 without its sign: a
// step may not leave a parameter or a velocity at or beyond ±2^64, whose
// square is not finite in float32 (any product or norm of it overflows).
// Such a parameter, finite or not, is out of its domain: one push of a
// finite but extreme gradient (3e38 in every value) would otherwise be
// applied even before the outlier rule has a history. An honest step
// comes nowhere near it. Comparing the bits costs what the NaN/Inf test
// did; NaN and ±Inf compare above it.
const maxParamBits = 0x5f800000

// outOfDomain reports whether x is NaN, ±Inf or at least 2^64 in magnitude.
func outOfDomain(x float32) bool { return math.Float32bits(x)&0x7fffffff >= maxParamBits }

// firstNonFiniteStep returns the first index i at which step(o, theta,
// velocity, g, lr) would write a NaN, ±Inf or a value of magnitude 2^64 or
// more (outOfDomain) into theta or velocity, or −1. It repeats step's
// arithmetic, so the answer is exact and the same on every replica.
func firstNonFiniteStep(o shardapi.Optimizer, theta, velocity, g []float32, lr float64) int {
	lr32 := float32(lr)
	bad := outOfDomain
	if o.Kind == shardapi.SGD {
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

// firstNonFiniteStepSum is firstNonFiniteStep with the gradient sum[i] +
// g[i] (added in float32), without materialising the sum (a loop of its
// own: this runs on every push).
func firstNonFiniteStepSum(o shardapi.Optimizer, theta, velocity, sum, g []float32, lr float64) int {
	lr32 := float32(lr)
	bad := outOfDomain
	if o.Kind == shardapi.SGD {
		for i, gi := range g {
			gi = sum[i] + gi
			if bad(theta[i] - float32(lr32*gi)) {
				return i
			}
		}
		return -1
	}
	mu := float32(o.Momentum)
	for i, gi := range g {
		gi = sum[i] + gi
		v := float32(mu*velocity[i]) + gi
		if bad(v) || bad(theta[i]-float32(lr32*v)) {
			return i
		}
	}
	return -1
}
