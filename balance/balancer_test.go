package balance

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// rounds drives b through BSP rounds of workers whose true per-sample time
// is per[i](round) ns (no overhead) with ±jitter uniform noise, and returns
// per round the slowest actual finish over the optimal equal finish.
type rig struct {
	b      *Balancer
	ids    []string
	rng    *rand.Rand
	jitter float64
	round  int64
}

func newRig(t *testing.T, n int, jitter float64) *rig {
	t.Helper()
	b, err := New(DefaultConfig(32))
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{b: b, rng: rand.New(rand.NewPCG(7, 8)), jitter: jitter}
	for i := range n {
		r.ids = append(r.ids, fmt.Sprintf("w%02d", i))
		b.Join(r.ids[i], 0)
	}
	return r
}

// step runs one round with true times per and returns the slowest
// worker's predicted-free finish over the ideal B/Σ(1/P).
func (r *rig) step(per []float64) float64 {
	var worst, speed float64
	for i, id := range r.ids {
		batch, _, _ := r.b.Batch(id)
		ns := per[i] * float64(batch) * (1 + r.jitter*(2*r.rng.Float64()-1))
		worst = math.Max(worst, per[i]*float64(batch))
		speed += 1 / per[i]
		r.b.Observe(id, batch, int64(ns))
	}
	r.round++
	r.b.Decide(r.round)
	return worst / (float64(r.b.global) / speed)
}

func TestBalancerConvergesAndFreezesInDeadBand(t *testing.T) {
	r := newRig(t, 4, 0.1)
	per := []float64{1e5, 1e5, 2e5, 4e5}
	var last float64
	for range 40 {
		last = r.step(per)
	}
	if last > 1.06 {
		t.Fatalf("after 40 rounds the slowest finishes at %.3f× the ideal; allocation %+v", last, r.b.Allocation())
	}
	// Static speeds: the allocation settles — few changes over 400 rounds,
	// and the step has been halved at reversals rather than oscillating at
	// full size.
	before := r.b.Stats().Moves
	worst := 0.0
	for range 400 {
		worst = math.Max(worst, r.step(per))
	}
	moves := r.b.Stats().Moves - before
	if moves > 40 || worst > 1.12 {
		t.Fatalf("static speeds: %d re-allocations in 400 rounds, worst %.3f× ideal; %+v", moves, worst, r.b.Stats())
	}
	t.Logf("converged %+v; %d moves in 400 rounds, worst %.3f", r.b.Allocation().Workers, moves, worst)
}

func TestBalancerNoJitterMovesOnceThenStops(t *testing.T) {
	r := newRig(t, 4, 0)
	per := []float64{1e5, 1e5, 2e5, 4e5}
	for range 100 {
		r.step(per)
	}
	st := r.b.Stats()
	var got []int64
	for _, a := range r.b.Allocation().Workers {
		got = append(got, a.Batch)
	}
	if !slices.Equal(got, []int64{47, 47, 23, 11}) || st.Moves > 3 {
		t.Fatalf("exact speeds: %v after %d moves, want 47 47 23 11 in at most 3", got, st.Moves)
	}
}

func TestBalancerWorkerSlowing3xIsRebalancedWithin30Rounds(t *testing.T) {
	r := newRig(t, 4, 0.1)
	per := []float64{1e5, 1e5, 2e5, 4e5}
	for range 100 {
		r.step(per)
	}
	per[0] *= 3 // the fastest worker slows 3×
	var at int
	for k := 1; k <= 60; k++ {
		if r.step(per) < 1.08 && at == 0 {
			at = k
		}
	}
	if at == 0 || at > 30 {
		t.Fatalf("after the slow-down: within 8%% of ideal at round %d (want ≤ 30); %+v", at, r.b.Allocation().Workers)
	}
	t.Logf("re-balanced %d rounds after a 3× slow-down: %+v", at, r.b.Allocation().Workers)
}

func TestBalancerPartialStepsAndHalving(t *testing.T) {
	// A model change of 20% (inside Rapid, outside DeadBand) moves half way.
	b := twoWorkersObserved(t, 3200, 4000)
	if !b.Decide(10) {
		t.Fatal("no re-allocation for a 25% imbalance")
	}
	a1, _, _ := b.Batch("a")
	target, _ := Allocate([]Model{{P: 100}, {P: 125}}, 64, nil)
	if a1 <= 32 || a1 >= target[0] {
		t.Fatalf("first step to %d, want strictly between 32 and the optimum %d", a1, target[0])
	}
	if b.Decide(11) {
		t.Fatal("re-allocated within the interval")
	}
	// The speeds reverse: the next move is against the last one, and η halves.
	for range 12 {
		b.Observe("a", a1, 125*a1)
		b.Observe("b", 64-a1, 100*(64-a1))
	}
	if !b.Decide(20) || b.Stats().Reversed != 1 || b.Stats().Step != 0.25 {
		t.Fatalf("reversal: %+v, want one halving to 0.25", b.Stats())
	}
	// Inside the dead band nothing moves.
	c := twoWorkersObserved(t, 3200, 3250)
	if c.Decide(10) {
		t.Fatal("re-allocated for a 1.5% imbalance")
	}
}

// TestBalancerBlindAllocationIsReplacedOnceModelled: an allocation made
// while a worker had no model of its own (the first, a joiner's) carries no
// prediction for it; the first Decide at which every worker has a model
// replaces it, even when the batches stay (equal workers), so that every
// assignment then carries a prediction (a worker under local rounds probes
// until it does). The flag survives an encoding.
func TestBalancerBlindAllocationIsReplacedOnceModelled(t *testing.T) {
	b, _ := New(DefaultConfig(32))
	b.Join("a", 0)
	b.Join("b", 0)
	predicted := func() (n int) {
		for _, w := range b.Allocation().Workers {
			if w.PredictNs > 0 {
				n++
			}
		}
		return n
	}
	b.Observe("a", 32, 3200)
	b.Observe("b", 32, 3200)
	if b.Decide(1) || predicted() != 0 {
		t.Fatalf("one observation each: decided, or %d predictions", predicted())
	}
	b.Observe("a", 32, 3200)
	b.Observe("b", 32, 3200)
	enc, _ := b.MarshalBinary()
	c, _ := New(b.Config())
	if err := c.UnmarshalBinary(enc); err != nil {
		t.Fatal(err)
	}
	v := b.Allocation().Version
	if !b.Decide(2) || !c.Decide(2) || b.Allocation().Version != v+1 || predicted() != 2 {
		t.Fatalf("equal workers, both modelled: not replaced (version %d → %d, %d predictions)", v, b.Allocation().Version, predicted())
	}
	if got := b.Allocation().Workers; got[0].Batch != 32 || got[1].Batch != 32 {
		t.Fatalf("equal workers: %+v", got)
	}
	if b.Decide(10) {
		t.Fatal("re-allocated equal workers once modelled")
	}
	// A joiner is predicted at the others' median, blind, until its own
	// model is in: then replaced, not before.
	b.Join("c", 11)
	if predicted() != 2 {
		t.Fatalf("after c joined: %d predictions, want a's and b's", predicted())
	}
	for r := int64(12); r < 14; r++ {
		for _, id := range []string{"a", "b", "c"} {
			n, _, _ := b.Batch(id)
			b.Observe(id, n, 100*n)
		}
		if got := b.Decide(r); got != (r == 13) {
			t.Fatalf("round %d: decided %v", r, got)
		}
	}
	if predicted() != 3 {
		t.Fatalf("c modelled: %d predictions", predicted())
	}
	// An encoding of version 1 (no blind byte) reads as not blind.
	old := append([]byte{1}, enc[1:1+6*8]...)
	old = append(old, enc[1+6*8+1:]...)
	if err := c.UnmarshalBinary(old); err != nil || c.blind {
		t.Fatalf("version 1: %v, blind %v", err, c.blind)
	}
}

func TestBalancerMembershipKeepsGlobalBatch(t *testing.T) {
	b, _ := New(DefaultConfig(32))
	for _, id := range []string{"c", "a", "b"} {
		b.Join(id, 0)
	}
	if b.Join("a", 1) {
		t.Fatal("joined twice")
	}
	a := b.Allocation()
	if a.Global != 96 || a.Workers[0].Worker != "a" || a.Workers[2].Offset != 64 {
		t.Fatalf("three joined: %+v", a)
	}
	for range 5 {
		b.Observe("a", 32, 3200)
		b.Observe("b", 32, 6400)
		b.Observe("c", 32, 3200)
	}
	b.Leave("c", 3)
	a = b.Allocation()
	if a.Global != 96 || a.Workers[0].Batch != 64 || a.Workers[1].Batch != 32 {
		t.Fatalf("after c left, want a:64 b:32 of 96: %+v", a)
	}
	// A joiner is predicted at the median of the known models.
	b.Join("d", 4)
	if a = b.Allocation(); a.Global != 96 || len(a.Workers) != 3 {
		t.Fatalf("after d joined: %+v", a)
	}
	var sum int64
	for _, w := range a.Workers {
		sum += w.Batch
	}
	if sum != 96 {
		t.Fatalf("Σ %d", sum)
	}
	b.Join("e", 5)
	if b.Allocation().Global != 128 {
		t.Fatalf("a fourth worker grows the global batch to 128: %+v", b.Allocation())
	}
}

func TestBalancerMarshalContinuesIdentically(t *testing.T) {
	r := newRig(t, 5, 0.1)
	per := []float64{1e5, 3e5, 2e5, 4e5, 1e5}
	for range 37 {
		r.step(per)
	}
	enc, err := r.b.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	c, _ := New(r.b.Config())
	if err := c.UnmarshalBinary(enc); err != nil {
		t.Fatal(err)
	}
	if again, _ := c.MarshalBinary(); !bytes.Equal(enc, again) {
		t.Fatal("re-encoding differs")
	}
	rng := rand.New(rand.NewPCG(1, 1))
	for k := range 60 {
		for i, id := range r.ids {
			batch, _, _ := r.b.Batch(id)
			ns := int64(per[i] * float64(batch) * (0.9 + 0.2*rng.Float64()))
			r.b.Observe(id, batch, ns)
			c.Observe(id, batch, ns)
		}
		if x, y := r.b.Decide(int64(40+k)), c.Decide(int64(40+k)); x != y {
			t.Fatalf("round %d: decisions differ", k)
		}
	}
	x, _ := r.b.MarshalBinary()
	y, _ := c.MarshalBinary()
	if !bytes.Equal(x, y) {
		t.Fatal("restored balancer diverged")
	}
	// Every truncation and a trailing byte are refused, changing nothing.
	for i := range len(enc) {
		if err := c.UnmarshalBinary(enc[:i]); err == nil {
			t.Fatalf("truncated to %d accepted", i)
		}
	}
	if err := c.UnmarshalBinary(append(slices.Clone(enc), 0)); err == nil {
		t.Fatal("trailing byte accepted")
	}
	if z, _ := c.MarshalBinary(); !bytes.Equal(z, y) {
		t.Fatal("a refused decode changed the state")
	}
}

func FuzzUnmarshalBinary(f *testing.F) {
	b, _ := New(DefaultConfig(32))
	b.Join("a", 0)
	b.Join("b", 0)
	b.Observe("a", 32, 100)
	enc, _ := b.MarshalBinary()
	f.Add(enc)
	f.Fuzz(func(t *testing.T, data []byte) {
		c, _ := New(DefaultConfig(32))
		if err := c.UnmarshalBinary(data); err != nil {
			return
		}
		again, err := c.MarshalBinary()
		if err != nil || !bytes.Equal(again, data) {
			t.Fatalf("accepted bytes do not re-encode to themselves")
		}
		c.Decide(1 << 40)
		c.Allocation()
	})
}

// twoWorkersObserved is a balancer over workers a and b at 32 samples each,
// modelled alike (its first allocation no longer blind, decided at round
// 1), then having seen a take aNs and b take bNs per batch twelve times.
func twoWorkersObserved(t *testing.T, aNs, bNs int64) *Balancer {
	t.Helper()
	b, err := New(DefaultConfig(32))
	if err != nil {
		t.Fatal(err)
	}
	b.Join("a", 0)
	b.Join("b", 0)
	for range 2 {
		b.Observe("a", 32, 3200)
		b.Observe("b", 32, 3200)
	}
	if !b.Decide(1) {
		t.Fatal("the blind allocation was not replaced once both workers were modelled")
	}
	for range 12 {
		b.Observe("a", 32, aNs)
		b.Observe("b", 32, bNs)
	}
	return b
}

// Equal workers whose compute times are noisy (±30% per iteration, as on
// two shared cores under load): the predicted gains come from the fits'
// noise, and re-allocating after them only makes the largest batch, which
// sets a gated round, larger. With the noise band the allocation stays
// near the equal split; without it (the 5% dead band alone) it wanders.
func TestBalancerIgnoresGainsInsideTheFitsNoise(t *testing.T) {
	run := func(noiseBand float64) (moves uint64, meanMax float64) {
		cfg := DefaultConfig(64)
		cfg.NoiseBand = noiseBand
		b, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		r := &rig{b: b, rng: rand.New(rand.NewPCG(11, 12)), jitter: 0.3}
		for i := range 4 {
			r.ids = append(r.ids, fmt.Sprintf("w%02d", i))
			b.Join(r.ids[i], 0)
		}
		per := []float64{1e6, 1e6, 1e6, 1e6}
		for range 50 {
			r.step(per)
		}
		before := b.Stats().Moves
		var sum float64
		for range 400 {
			r.step(per)
			var mx int64
			for _, a := range b.Allocation().Workers {
				mx = max(mx, a.Batch)
			}
			sum += float64(mx)
		}
		return b.Stats().Moves - before, sum / 400
	}
	offMoves, offMax := run(0)
	onMoves, onMax := run(DefaultConfig(64).NoiseBand)
	t.Logf("400 rounds, ±30%% jitter, equal speeds: without the noise band %d moves, mean largest batch %.1f; with it %d moves, %.1f",
		offMoves, offMax, onMoves, onMax)
	if onMoves > 4 || onMax > 66 {
		t.Errorf("with the noise band: %d re-allocations, mean largest batch %.1f (want ≤ 4 and ≤ 66 of 64)", onMoves, onMax)
	}
	if offMoves <= onMoves || offMax <= onMax {
		t.Errorf("the control without the noise band did not wander more: %d moves, %.1f", offMoves, offMax)
	}
}

// TestBalancerRescaleKeepsTheSharesProportions: a new base (the job's
// round under --local-steps auto) re-sizes the global batch to base × the
// most workers present — a worker that left still counts — and the
// modelled shares keep their proportions at the new size.
func TestBalancerRescaleKeepsTheSharesProportions(t *testing.T) {
	b, _ := New(DefaultConfig(32))
	for _, id := range []string{"a", "b", "c"} {
		b.Join(id, 0)
	}
	for range 5 {
		b.Observe("a", 32, 3200)
		b.Observe("b", 32, 6400)
		b.Observe("c", 32, 6400)
	}
	b.Leave("c", 1)
	if err := b.Rescale(DefaultConfig(128), 2); err != nil {
		t.Fatal(err)
	}
	a := b.Allocation()
	if a.Global != 384 || b.Config().Min != 16 || a.Workers[0].Batch != 256 || a.Workers[1].Batch != 128 || a.Round != 2 {
		t.Fatalf("rescaled to base 128: want global 384 as a:256 b:128 at round 2, min 16: %+v (min %d)", a, b.Config().Min)
	}
	v := a.Version
	if err := b.Rescale(Config{Base: 0}, 3); err == nil || b.Allocation().Version != v || b.Global() != 384 {
		t.Fatalf("a bad config: error %v, version %d (was %d), global %d", err, b.Allocation().Version, v, b.Global())
	}
}
