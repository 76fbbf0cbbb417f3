package shard

import "math"

// Replicated counters saturate rather than wrap: a count at its type's
// bound stays there, so no input drives the state out of its domain (a
// negative sample count, a data position before the start). The bounds on
// a push's fields (checkPush) keep every honest count far below them.

// satAdd is a + b for b ≥ 0, at most math.MaxInt64.
func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// satAddU is a + b, at most math.MaxUint64.
func satAddU(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}

// satMulAdd is a + k·m for k, m ≥ 0, at most math.MaxInt64.
func satMulAdd(a, k, m int64) int64 {
	if k > 0 && m > math.MaxInt64/k {
		return math.MaxInt64
	}
	return satAdd(a, k*m)
}
