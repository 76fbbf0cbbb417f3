package shard

import "dsspmesh/shardapi"

// The outer rule of a job of local rounds (shardapi.Outer; docs/design.md,
// "Local rounds"). A push then carries a round's pseudo-gradient Δ =
// θ_start − θ_local, never weighted by its samples (it grows with its
// round's steps already: shardapi.Spec.Weighted); an entry's accepted
// pseudo-gradients are summed (S, k
// arrivals: pushes with samples) and applied in one step, with N the
// workers in the gate (at least 1) and c the arrivals since the last
// momentum step (params.arrivals, replicated):
//
//	sgd:       θ ← θ − (LR/N)·S
//	nesterov:  if c = 0 and k > 0:  m ← μ·m        (a momentum period starts)
//	           m ← m + S/N;  θ ← θ − (LR/N)·S
//	           if c + k ≥ N:  θ ← θ − LR·μ·m;  c ← 0   (it ends)
//	           else:          c ← c + k
//
// m is the momentum at the end of a period and, within one, the next
// momentum being formed (μ·m plus the period's arrivals ÷ N): the same
// state as a buffer b of the period's arrivals beside the momentum (m_end
// = μ·m + (b + S)/N), in one vector instead of two, so a replica holds and
// a snapshot writes θ and m only. Over a synchronous round (N arrivals
// from θ_start) the sum of the immediate parts is LR·mean(Δ) and the
// momentum step once at its end, so the round applies m ← μ·m + mean(Δ);
// θ ← θ − LR·(mean(Δ) + μ·m): Nesterov on the mean pseudo-gradient,
// DiLoCo's outer step. Under bounded staleness the arrivals of different
// rounds interleave and the momentum moves θ once per N of them (Delayed
// Nesterov, arXiv 2401.09135), not once per arrival, which would multiply
// its weight by N. Each product is rounded to float32 explicitly, as in
// step, so no replica fuses a multiply-add the others do not.

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
