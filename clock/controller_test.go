package clock

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestControllerGoldenCases(t *testing.T) {
	for _, c := range []struct {
		p, s Timestamps
		rMax int64
		want int64
	}{
		{Timestamps{100, 99}, Timestamps{100, 96}, 12, 4},
		{Timestamps{100, 97}, Timestamps{100, 96}, 3, 1}, // r=1 and r=3 tie at 1
		{Timestamps{100, 97}, Timestamps{100, 96}, 12, 4},
		{Timestamps{100, 99}, Timestamps{100, 96}, 0, 0},
		{Timestamps{100, 100}, Timestamps{100, 96}, 12, 0}, // I_p = 0: all r tie
	} {
		for _, obj := range []Objective{ObjectiveAbs, ObjectiveWait} {
			if got := SyncController(c.p, c.s, c.rMax, obj); got != c.want {
				t.Errorf("%s A[p]=%v A[s]=%v r_max=%d: r*=%d, want %d", obj, c.p, c.s, c.rMax, got, c.want)
			}
		}
	}
}

func TestWaitObjectiveIsOneSided(t *testing.T) {
	// Sim_s = 110, 120, 130 in both cases.
	for _, c := range []struct {
		p         Timestamps
		abs, wait int64
	}{
		// Sim_p = 100, 108, 116: r=1 is 2 early, best both ways.
		{Timestamps{100, 92}, 1, 1},
		// Sim_p = 100, 105, 110: r=2 meets 110 exactly.
		{Timestamps{100, 95}, 2, 2},
		// Sim_p = 100, 111, 122: |·| likes r=1 (1 late for 110), but arriving
		// late means waiting for 120 (9); r=2 waits 8 for 130.
		{Timestamps{100, 89}, 1, 2},
	} {
		s := Timestamps{100, 90}
		if a, w := SyncController(c.p, s, 2, ObjectiveAbs), SyncController(c.p, s, 2, ObjectiveWait); a != c.abs || w != c.wait {
			t.Errorf("A[p]=%v: abs %d wait %d, want %d %d", c.p, a, w, c.abs, c.wait)
		}
	}
}

func TestControllerMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		p0, s0 := rng.Int64N(1000), rng.Int64N(1000)
		p := Timestamps{p0, p0 - rng.Int64N(50)}
		s := Timestamps{s0, s0 - rng.Int64N(200)}
		rMax := rng.Int64N(20)
		for _, obj := range []Objective{ObjectiveAbs, ObjectiveWait} {
			if got, want := SyncController(p, s, rMax, obj), naiveController(p, s, rMax, obj); got != want {
				t.Fatalf("case %d %s p=%v s=%v r_max=%d: %d, naive %d", i, obj, p, s, rMax, got, want)
			}
		}
	}
}

func TestControllerSaturatesInsteadOfWrapping(t *testing.T) {
	p := Timestamps{math.MaxInt64, math.MinInt64}
	s := Timestamps{math.MinInt64, math.MaxInt64}
	for _, obj := range []Objective{ObjectiveAbs, ObjectiveWait} {
		if got := SyncController(p, s, MaxRMax+5, obj); got < 0 || got > MaxRMax {
			t.Fatalf("%s: %d out of range", obj, got)
		}
	}
}

// TestControllerFastPathMatchesSaturating compares the plain-arithmetic
// path with the saturating one on inputs up to fastSafe's bounds.
func TestControllerFastPathMatchesSaturating(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	val := func(bound int64) int64 {
		switch rng.IntN(4) {
		case 0:
			return rng.Int64N(2000) - 1000
		case 1:
			return bound - 1 - rng.Int64N(1000)
		case 2:
			return -bound + 1 + rng.Int64N(1000)
		}
		return rng.Int64N(2*bound-1) - bound + 1
	}
	for i := range 30000 {
		pl, sl := val(fastTimeBound), val(fastTimeBound)
		ip, is := max(0, val(fastIntervalBound)), max(0, val(fastIntervalBound))
		if rng.IntN(3) == 0 {
			ip, is = rng.Int64N(1000), rng.Int64N(1000)
		}
		if rng.IntN(2) == 0 {
			sl = pl + rng.Int64N(4000) - 2000
		}
		rMax := []int64{0, 1, 12, rng.Int64N(40)}[rng.IntN(4)]
		if i%500 == 0 {
			rMax = MaxRMax
		}
		if !fastSafe(pl, sl, ip, is) {
			continue
		}
		p, s := Timestamps{pl, 0}, Timestamps{sl, 0}
		for _, obj := range []Objective{ObjectiveAbs, ObjectiveWait} {
			fast := syncControllerFast(pl-sl, ip, is, rMax, obj)
			sat := syncControllerSat(p, s, ip, is, rMax, obj)
			if fast != sat {
				t.Fatalf("case %d %s A_p=%d A_s=%d I_p=%d I_s=%d r_max=%d: fast %d, saturating %d", i, obj, pl, sl, ip, is, rMax, fast, sat)
			}
		}
	}
}
