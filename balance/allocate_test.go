package balance

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestAllocateProperties checks the allocator over random models, bounds
// and global batches: Σ = B, bounds kept, the same answer twice, no single
// sample moved between two workers lowers the slowest finish.
func TestAllocateProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 2000 {
		n := 1 + rng.IntN(16)
		models := make([]Model, n)
		bounds := make([]Bounds, n)
		var sumMin, sumMax int64
		for i := range models {
			models[i] = Model{P: 1e3 * (0.2 + 5*rng.Float64())}
			if rng.IntN(2) == 0 {
				models[i].A = 1e5 * rng.Float64()
			}
			bounds[i].Min = int64(rng.IntN(4))
			if rng.IntN(3) == 0 {
				bounds[i].Max = bounds[i].Min + 1 + int64(rng.IntN(200))
			}
			sumMin += bounds[i].Min
			sumMax += bounds[i].Max
		}
		total := sumMin + int64(rng.IntN(400))
		b, err := Allocate(models, total, bounds)
		if err != nil {
			// only when the caps cannot hold total
			capped := true
			for _, bd := range bounds {
				capped = capped && bd.Max > 0
			}
			if !capped || total <= sumMax {
				t.Fatalf("trial %d: %v", trial, err)
			}
			continue
		}
		again, _ := Allocate(models, total, bounds)
		if !slices.Equal(b, again) {
			t.Fatalf("trial %d: not deterministic: %v then %v", trial, b, again)
		}
		var sum int64
		for i, x := range b {
			sum += x
			if x < bounds[i].Min || (bounds[i].Max > 0 && x > bounds[i].Max) {
				t.Fatalf("trial %d: worker %d batch %d outside %+v", trial, i, x, bounds[i])
			}
		}
		if sum != total {
			t.Fatalf("trial %d: Σ = %d, want %d (%v)", trial, sum, total, b)
		}
		// No move of one sample from the slowest worker to another lowers
		// the slowest finish: the greedy min-max optimum.
		worst := MaxTime(models, b)
		for i := range b {
			if b[i] == 0 || models[i].Time(b[i]) < worst || b[i] <= bounds[i].Min {
				continue
			}
			for j := range b {
				if j == i || (bounds[j].Max > 0 && b[j] >= bounds[j].Max) {
					continue
				}
				c := slices.Clone(b)
				c[i]--
				c[j]++
				if MaxTime(models, c) < worst-1e-6 {
					t.Fatalf("trial %d: moving a sample %d→%d lowers the max %g → %g (%v)", trial, i, j, worst, MaxTime(models, c), b)
				}
			}
		}
	}
}

// TestAllocateProportionalToSpeedWithoutOverhead: with A = 0 and no binding
// bound, b_i ∝ speed 1/P_i — every worker finishes within one sample of
// the slowest worker's time per sample of the equal finish B/Σ(1/P).
func TestAllocateProportionalToSpeedWithoutOverhead(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 500 {
		n := 1 + rng.IntN(12)
		models := make([]Model, n)
		var speed, slowest float64
		for i := range models {
			models[i] = Model{P: 1 + 9*rng.Float64()}
			speed += 1 / models[i].P
			slowest = math.Max(slowest, models[i].P)
		}
		total := int64(n * (8 + rng.IntN(100)))
		b, err := Allocate(models, total, nil)
		if err != nil {
			t.Fatal(err)
		}
		equal := float64(total) / speed
		for i, x := range b {
			if finish := float64(x) * models[i].P; math.Abs(finish-equal) > slowest {
				t.Fatalf("trial %d: worker %d gets %d (finish %.1f), speed share %.2f (finish %.1f) (%v)",
					trial, i, x, finish, equal/models[i].P, equal, b)
			}
		}
	}
	// The speeds of the issue: 1,1,2,4 slower, base 32 each.
	b, _ := Allocate([]Model{{P: 1}, {P: 1}, {P: 2}, {P: 4}}, 128, nil)
	if !slices.Equal(b, []int64{47, 47, 23, 11}) {
		t.Fatalf("1,1,2,4 over 128: %v, want 47 47 23 11", b)
	}
}

func TestAllocateOverheadAndBounds(t *testing.T) {
	// An overhead of 20 ns on a worker as fast as the other takes samples
	// from it: equal finish at A + P·b.
	b, _ := Allocate([]Model{{A: 20, P: 1}, {P: 1}}, 100, nil)
	if !slices.Equal(b, []int64{40, 60}) {
		t.Fatalf("overhead: %v, want 40 60", b)
	}
	// A cap pins the fast worker; the rest goes to the others.
	b, _ = Allocate([]Model{{P: 1}, {P: 4}, {P: 4}}, 120, []Bounds{{Max: 50}, {}, {}})
	if !slices.Equal(b, []int64{50, 35, 35}) {
		t.Fatalf("cap: %v, want 50 35 35", b)
	}
	// A floor lifts the slow one.
	b, _ = Allocate([]Model{{P: 1}, {P: 100}}, 100, []Bounds{{Min: 10}, {Min: 10}})
	if !slices.Equal(b, []int64{90, 10}) {
		t.Fatalf("floor: %v, want 90 10", b)
	}
	if _, err := Allocate([]Model{{P: 1}}, 10, []Bounds{{Max: 5}}); err == nil {
		t.Fatal("a cap below the global batch accepted")
	}
	if _, err := Allocate([]Model{{P: 0}}, 10, nil); err == nil {
		t.Fatal("a model with P = 0 accepted")
	}
}

func TestWindowFitIsRobust(t *testing.T) {
	var w Window
	w.Cap = 12
	// Affine truth: 5000 + 100·b, with batches far enough apart.
	for i, b := range []int64{32, 32, 48, 48, 20, 20, 40, 40} {
		jit := 1 + 0.02*float64(i%3-1)
		w.Add(Obs{Samples: b, ComputeNs: int64((5000 + 100*float64(b)) * jit)})
	}
	m, ok := w.Fit(3)
	if !ok || math.Abs(m.A-5000) > 800 || math.Abs(m.P-100)/100 > 0.05 {
		t.Fatalf("fit %+v, want A≈5000 P≈100", m)
	}
	// One wild outlier changes little.
	w.Add(Obs{Samples: 32, ComputeNs: 1e9})
	if m2, _ := w.Fit(3); math.Abs(m2.P-m.P)/m.P > 0.1 {
		t.Fatalf("one outlier moved P %g → %g", m.P, m2.P)
	}
	// All batches equal: A kept, P = median per-sample time.
	var e Window
	e.Cap = 4
	for _, c := range []int64{3200, 3300, 3100, 99999} {
		e.Add(Obs{Samples: 32, ComputeNs: c})
	}
	if m, _ := e.Fit(1); m.A != 0 || math.Abs(m.P-(3200+3300)/2/32.0) > 1e-9 {
		t.Fatalf("degenerate fit %+v", m)
	}
	if e.Add(Obs{Samples: 0, ComputeNs: 5}) || e.Add(Obs{Samples: 5}) {
		t.Fatal("empty observations recorded")
	}
	if _, ok := (&Window{Cap: 4}).Fit(1); ok {
		t.Fatal("fit of nothing")
	}
}
