package shard

import "dsspmesh/shardapi"

// The outer rule of a job of local rounds (shardapi.Outer; docs/design.md,
// "The outer rule"): an entry's pseudo-gradients summed (S, k arrivals)
// move θ by −(LR/N)·S and, under Nesterov, feed the momentum m, which
// steps θ once per N arrivals (params.arrivals counts them). Each product
// is rounded to float32 explicitly, as in step, so no replica fuses a
// multiply-add the others do not.

// outerRates are one entry's constants of the outer rule.
type outerRates struct {
	a   float32 // LR/N: the part of each arrival applied at once
	inv float32 // 1/N: the buffer's mean
	lr  float32
	mu  float32
	n   int64 // N
}

// ratesOf is o's constants with workers in the gate (N, at least 1).
func ratesOf(o shardapi.Outer, workers int) outerRates {
	n := max(int64(workers), 1)
	return outerRates{a: float32(o.LR / float64(n)), inv: float32(1 / float64(n)), lr: float32(o.LR),
		mu: float32(o.Momentum), n: n}
}

// outerStep applies one entry's sum s of pseudo-gradients by o's rule;
// start: the entry starts a momentum period (outerStarts), fire: it ends
// one (outerFires).
func outerStep(o shardapi.Outer, r outerRates, theta, m, s []float32, start, fire bool) {
	if !o.Nesterov() {
		for i, si := range s {
			theta[i] -= float32(r.a * si)
		}
		return
	}
	for i, si := range s {
		v, t := outerOne(r, theta[i], m[i], si, start, fire)
		m[i], theta[i] = v, t
	}
}

// outerOne is the nesterov rule on one parameter θ with momentum m and
// sum si: the new momentum and θ.
func outerOne(r outerRates, theta, m, si float32, start, fire bool) (float32, float32) {
	if start {
		m = float32(r.mu * m)
	}
	m += float32(r.inv * si)
	theta -= float32(r.a * si)
	if fire {
		theta -= float32(r.lr * float32(r.mu*m))
	}
	return m, theta
}

// firstBadOuterStep is firstNonFiniteStep for the outer rule: the first
// index at which outerStep with the sum sum + g (g alone when sum is nil)
// would leave θ or the momentum out of its domain, or −1. It repeats
// outerStep's arithmetic, so the answer is exact.
func firstBadOuterStep(o shardapi.Outer, r outerRates, theta, m, sum, g []float32, start, fire bool) int {
	bad := outOfDomain
	for i, si := range g {
		if sum != nil {
			si = sum[i] + si
		}
		if !o.Nesterov() {
			if bad(theta[i] - float32(r.a*si)) {
				return i
			}
			continue
		}
		if v, t := outerOne(r, theta[i], m[i], si, start, fire); bad(v) || bad(t) {
			return i
		}
	}
	return -1
}

// hasVelocity reports whether a shard of spec keeps a velocity (momentum):
// Momentum without an outer rule, or the outer Nesterov's.
func hasVelocity(spec shardapi.Spec) bool {
	if spec.Outer.On() {
		return spec.Outer.Nesterov()
	}
	return spec.Optimizer.Kind == shardapi.Momentum
}

// maxArrivals bounds params.arrivals in a snapshot: it is reset whenever it
// reaches N, so it stays below the most workers a gate has held plus one
// entry's pushes, far below this.
const maxArrivals = 1 << 24
