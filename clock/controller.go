package clock

import "math"

// Timestamps are the receipt times of a worker's two latest pushes, A[i][0]
// (Latest) and A[i][1] (Previous), in nanoseconds.
type Timestamps struct {
	Latest, Previous int64
}

// interval is I = A[0] − A[1]; a negative interval (which the gate never
// records) counts as 0.
func (a Timestamps) interval() int64 { return max(0, satSub(a.Latest, a.Previous)) }

// SyncController is the paper's synchronization controller (Algorithm 2)
// for a fastest worker p and the slowest worker s, both with two timestamps:
//
//	Sim_p[r] = A[p][0] + r·I_p,      r = 0..rMax
//	Sim_s[k] = A[s][0] + (k+1)·I_s,  k = 0..rMax
//
// With ObjectiveAbs it returns argmin_r min_k |Sim_s[k] − Sim_p[r]|; with
// ObjectiveWait argmin_r of the wait from Sim_p[r] to the first Sim_s[k] at
// or after it (infinite when none is within the horizon). Ties go to the
// smallest r. rMax is clamped to [0, MaxRMax]. Arithmetic saturates at the
// int64 range, so absurd timestamps give a deterministic answer, not a
// wrap-around. Cost O(rMax).
func SyncController(p, s Timestamps, rMax int64, obj Objective) int64 {
	rMax = min(max(rMax, 0), MaxRMax)
	ip, is := p.interval(), s.interval()
	if fastSafe(p.Latest, s.Latest, ip, is) {
		return syncControllerFast(p.Latest-s.Latest, ip, is, rMax, obj)
	}
	return syncControllerSat(p, s, ip, is, rMax, obj)
}

// Bounds under which no step of the controller can leave int64 (r_max <=
// 2^16): |d| < 2^62 and (k+1)·I_s < 2^60, so plain arithmetic gives
// exactly what the saturating one does. Real timestamps (nanoseconds since
// an epoch, intervals of seconds to days) are far inside them.
const (
	fastTimeBound     = int64(1) << 60
	fastIntervalBound = int64(1) << 43
)

func fastSafe(pl, sl, ip, is int64) bool {
	return pl > -fastTimeBound && pl < fastTimeBound && sl > -fastTimeBound && sl < fastTimeBound &&
		ip < fastIntervalBound && is < fastIntervalBound
}

// syncControllerFast is SyncController without saturation, for inputs
// within fastSafe; d0 is A[p][0] − A[s][0].
func syncControllerFast(d0, ip, is, rMax int64, obj Objective) int64 {
	best, bestCost := int64(0), int64(math.MaxInt64)
	d := d0
	for r := int64(0); r <= rMax; r, d = r+1, d+ip {
		var cost int64
		switch {
		case obj == ObjectiveWait && is == 0:
			cost = math.MaxInt64
			if d <= 0 {
				cost = -d
			}
		case obj == ObjectiveWait:
			k := max(-floorDiv(-d, is)-1, 0)
			cost = math.MaxInt64
			if k <= rMax {
				cost = (k+1)*is - d
			}
		case is == 0:
			cost = d
			if d < 0 {
				cost = -d
			}
		default:
			k := floorDiv(d, is) - 1
			cost = math.MaxInt64
			for _, kk := range [2]int64{k, k + 1} {
				kk = min(max(kk, 0), rMax)
				v := (kk+1)*is - d
				if v < 0 {
					v = -v
				}
				cost = min(cost, v)
			}
		}
		if cost < bestCost {
			best, bestCost = r, cost
		}
	}
	return best
}

// syncControllerSat is SyncController with every step saturating.
func syncControllerSat(p, s Timestamps, ip, is, rMax int64, obj Objective) int64 {
	best, bestCost := int64(0), int64(math.MaxInt64)
	for r := int64(0); r <= rMax; r++ {
		// d is Sim_p[r] − A[s][0]; Sim_s[k] − Sim_p[r] = (k+1)·I_s − d.
		d := satSub(satAdd(p.Latest, satMul(r, ip)), s.Latest)
		var cost int64
		if obj == ObjectiveWait {
			cost = waitCost(d, is, rMax)
		} else {
			cost = absCost(d, is, rMax)
		}
		if cost < bestCost {
			best, bestCost = r, cost
		}
	}
	return best
}

// absCost is min over k in [0, rMax] of |(k+1)·is − d|.
func absCost(d, is, rMax int64) int64 {
	if is == 0 {
		return satAbs(d)
	}
	// The real minimiser is k+1 = d/is; check the two integers around it.
	k := floorDiv(d, is) - 1
	c := int64(math.MaxInt64)
	for _, kk := range [2]int64{k, k + 1} {
		kk = min(max(kk, 0), rMax)
		c = min(c, satAbs(satSub(satMul(kk+1, is), d)))
	}
	return c
}

// waitCost is (k+1)·is − d for the smallest k in [0, rMax] with
// (k+1)·is >= d, or MaxInt64 when there is none.
func waitCost(d, is, rMax int64) int64 {
	if is == 0 {
		if d <= 0 {
			return -d
		}
		return math.MaxInt64
	}
	k := max(ceilDiv(d, is)-1, 0)
	if k > rMax {
		return math.MaxInt64
	}
	return satSub(satMul(k+1, is), d)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func ceilDiv(a, b int64) int64 { return -floorDiv(-a, b) }

func satAdd(a, b int64) int64 {
	c := a + b
	if (c > a) != (b > 0) {
		if b > 0 {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return c
}

func satSub(a, b int64) int64 {
	if b == math.MinInt64 {
		if a >= 0 {
			return math.MaxInt64
		}
		return a - b
	}
	return satAdd(a, -b)
}

// satMul multiplies a non-negative a by b, saturating.
func satMul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	c := a * b
	if c/a != b || (a == -1 && b == math.MinInt64) {
		if (a > 0) == (b > 0) {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return c
}

func satAbs(a int64) int64 {
	if a == math.MinInt64 {
		return math.MaxInt64
	}
	if a < 0 {
		return -a
	}
	return a
}
