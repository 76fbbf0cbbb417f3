package clock

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// op is one recorded input to a gate.
type op struct {
	kind byte // 'p' push, 'a' add, 'r' remove
	w    WorkerID
	iter int64
	now  int64
}

// result is what a gate answered to one op.
type result struct {
	out Outcome
	rel []Release
	err bool
}

func apply(g *Gate, o op) result {
	switch o.kind {
	case 'a':
		_, err := g.AddWorker(o.w)
		return result{err: err != nil}
	case 'r':
		rel, err := g.RemoveWorker(o.w)
		return result{rel: rel, err: err != nil}
	}
	out, err := g.Push(o.w, o.iter, o.now)
	return result{out: out, err: err != nil}
}

// scenario drives workers of random speeds (ratios up to 10×, ±20% jitter)
// through a gate: the worker whose compute finishes first pushes; a held
// worker computes again only once released. With churn, workers die and
// join. It records every op, and calls check after each.
type scenario struct {
	seed   uint64
	steps  int
	churn  bool
	check  func(o op, r result)
	period map[WorkerID]int64
	ready  map[WorkerID]int64 // next push time; absent while held
	rng    *rand.Rand
	nextID int
}

func (s *scenario) addWorker(g *Gate) op {
	id := WorkerID(fmt.Sprintf("w%03d", s.nextID))
	s.nextID++
	s.period[id] = 100 + s.rng.Int64N(900) // speeds 1× to 10×
	return op{kind: 'a', w: id}
}

func (s *scenario) run(t *testing.T, g *Gate) []op {
	t.Helper()
	s.rng = rand.New(rand.NewPCG(s.seed, 7))
	s.period, s.ready = map[WorkerID]int64{}, map[WorkerID]int64{}
	var ops []op
	do := func(o op) result {
		r := apply(g, o)
		if r.err {
			t.Fatalf("seed %d op %+v rejected", s.seed, o)
		}
		ops = append(ops, o)
		if s.check != nil {
			s.check(o, r)
		}
		return r
	}
	var now int64
	for range 2 + s.rng.IntN(7) {
		o := s.addWorker(g)
		do(o)
		s.ready[o.w] = s.rng.Int64N(s.period[o.w])
	}
	for range s.steps {
		if s.churn && s.rng.IntN(100) == 0 {
			ids := g.Workers()
			if len(ids) > 1 && s.rng.IntN(2) == 0 {
				w := ids[s.rng.IntN(len(ids))]
				for _, rel := range do(op{kind: 'r', w: w}).rel {
					s.ready[rel.Worker] = now + s.period[rel.Worker]
				}
				delete(s.ready, w)
			} else if len(ids) < 12 {
				o := s.addWorker(g)
				do(o)
				s.ready[o.w] = now + s.period[o.w]
			}
			continue
		}
		var w WorkerID
		for _, id := range g.Workers() {
			if at, ok := s.ready[id]; ok && (w == "" || at < s.ready[w]) {
				w = id
			}
		}
		if w == "" {
			t.Fatalf("seed %d: deadlock: %d live workers all held: %v", s.seed, g.Len(), g.Waiting())
		}
		now = max(now, s.ready[w])
		iter, _ := g.Clock(w)
		r := do(op{kind: 'p', w: w, iter: iter, now: now})
		delete(s.ready, w)
		jitter := func(id WorkerID) int64 { return s.period[id] * (80 + s.rng.Int64N(41)) / 100 }
		if r.out.Released {
			s.ready[w] = now + jitter(w)
		}
		for _, rel := range r.out.Others {
			s.ready[rel.Worker] = now + jitter(rel.Worker)
		}
	}
	return ops
}

func randomPolicy(rng *rand.Rand) Policy {
	obj := Objective(rng.IntN(2))
	switch rng.IntN(5) {
	case 0:
		return Policy{Paradigm: BSP}
	case 1:
		return Policy{Paradigm: ASP}
	case 2:
		return Policy{Paradigm: SSP, SL: rng.Int64N(5)}
	case 3:
		return Policy{Paradigm: DSSP, SL: rng.Int64N(5), RMax: rng.Int64N(16), Objective: obj}
	}
	return Policy{Paradigm: DSSPPaper, SL: rng.Int64N(5), RMax: rng.Int64N(16), Objective: obj}
}

func seeds() uint64 {
	if testing.Short() {
		return 40
	}
	return 300
}

// TestGateMatchesReferenceAndKeepsInvariant runs random scenarios and
// checks every answer against the naive reference, the hard invariant
// (no OK with gap > s_U for bsp, ssp, dssp), that the controller runs only
// for a fastest worker, and (in run) that some live worker is never held.
func TestGateMatchesReferenceAndKeepsInvariant(t *testing.T) {
	for seed := range seeds() {
		rng := rand.New(rand.NewPCG(seed, 1))
		pol := randomPolicy(rng)
		g, err := NewGate(pol)
		if err != nil {
			t.Fatal(err)
		}
		ref := newRef(pol)
		sc := &scenario{seed: seed, steps: 1500, churn: seed%2 == 0}
		sc.check = func(o op, r result) {
			var want result
			switch o.kind {
			case 'a':
				ref.add(o.w)
			case 'r':
				want.rel = ref.remove(o.w)
			case 'p':
				want.out, _ = ref.push(o.w, o.iter, o.now)
			}
			if !reflect.DeepEqual(r, want) {
				t.Fatalf("seed %d %s op %+v:\n gate %+v\n ref  %+v", seed, pol, o, r, want)
			}
			if lo, hi := ref.minMax(); g.Min() != lo || g.Max() != hi {
				t.Fatalf("seed %d: t_min/t_max %d/%d, ref %d/%d", seed, g.Min(), g.Max(), lo, hi)
			}
			if o.kind != 'p' {
				return
			}
			if pol.Bounded() && r.out.Released && r.out.Gap > pol.SU() {
				t.Fatalf("seed %d %s: OK at gap %d > s_U %d", seed, pol, r.out.Gap, pol.SU())
			}
			for _, rel := range r.out.Others {
				if c, _ := g.Clock(rel.Worker); c-g.Min() > pol.SL {
					t.Fatalf("seed %d: released %v at gap %d > s_L", seed, rel, c-g.Min())
				}
			}
			if c, _ := g.Clock(o.w); r.out.ControllerCalled && c != g.Max() {
				t.Fatalf("seed %d: controller ran for %s at %d, t_max %d", seed, o.w, c, g.Max())
			}
		}
		sc.run(t, g)
	}
}

// lockstep runs the same scenario through gates of two policies and demands
// the same decisions (the controller fields aside: SSP never runs one).
func lockstep(t *testing.T, a, b Policy) {
	t.Helper()
	for seed := range seeds() {
		ga, _ := NewGate(a)
		gb, _ := NewGate(b)
		sc := &scenario{seed: seed, steps: 1500, churn: seed%2 == 1}
		sc.check = func(o op, ra result) {
			rb := apply(gb, o)
			if ra.err != rb.err || ra.out.Released != rb.out.Released || ra.out.Gap != rb.out.Gap ||
				ra.out.Grant != rb.out.Grant || !slices.Equal(ra.out.Others, rb.out.Others) || !slices.Equal(ra.rel, rb.rel) {
				t.Fatalf("seed %d op %+v: %s %+v, %s %+v", seed, o, a, ra, b, rb)
			}
		}
		sc.run(t, ga)
	}
}

func TestDSSPWithZeroRMaxIsSSP(t *testing.T) {
	for s := range int64(3) {
		lockstep(t, Policy{Paradigm: DSSP, SL: s}, Policy{Paradigm: SSP, SL: s})
	}
}

func TestSSPZeroIsBSP(t *testing.T) {
	lockstep(t, Policy{Paradigm: SSP}, Policy{Paradigm: BSP})
}

// TestSnapshotRestoreContinuesIdentically records a scenario, replays it
// with a snapshot and restore at several points, and demands identical
// answers and identical final bytes.
func TestSnapshotRestoreContinuesIdentically(t *testing.T) {
	for seed := range uint64(20) {
		pol := randomPolicy(rand.New(rand.NewPCG(seed, 3)))
		g, _ := NewGate(pol)
		var want []result
		sc := &scenario{seed: seed, steps: 1000, churn: true, check: func(o op, r result) { want = append(want, r) }}
		ops := sc.run(t, g)
		final, _ := g.MarshalBinary()

		for _, cut := range []int{0, len(ops) / 3, len(ops) / 2, len(ops) - 1} {
			h, _ := NewGate(pol)
			for i, o := range ops {
				if i == cut {
					snap, err := h.MarshalBinary()
					if err != nil {
						t.Fatal(err)
					}
					var restored Gate
					if err := restored.UnmarshalBinary(snap); err != nil {
						t.Fatalf("seed %d cut %d: %v", seed, cut, err)
					}
					again, _ := restored.MarshalBinary()
					if !bytes.Equal(snap, again) {
						t.Fatalf("seed %d cut %d: restore changed the bytes", seed, cut)
					}
					h = &restored
				}
				if got := apply(h, o); !reflect.DeepEqual(got, want[i]) {
					t.Fatalf("seed %d cut %d op %d %+v: %+v, want %+v", seed, cut, i, o, got, want[i])
				}
			}
			if got, _ := h.MarshalBinary(); !bytes.Equal(got, final) {
				t.Fatalf("seed %d cut %d: final bytes differ", seed, cut)
			}
		}
	}
}
