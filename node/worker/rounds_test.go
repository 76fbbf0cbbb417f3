package worker

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"

	"dsspmesh/cudaops"
	"dsspmesh/shardapi"
)

// quadCompute is a Compute of the loss ½‖θ − c‖² with c = the batch's
// position (every coordinate): its gradient is θ − c. It records every
// Next.
type quadCompute struct {
	p     int
	c     float32
	loads [][3]int64 // n, h, pos
}

func (q *quadCompute) NumParams() int { return q.p }
func (q *quadCompute) Next(n, h int, pos int64) error {
	q.loads = append(q.loads, [3]int64{int64(n), int64(h), pos})
	q.c = float32(pos)
	return nil
}
func (q *quadCompute) Gradient(_ context.Context, theta []float32, lo, hi int, emit func(int, []float32)) (float64, error) {
	g := make([]float32, len(theta))
	loss := 0.0
	for i, x := range theta {
		g[i] = x - q.c
		loss += 0.5 * float64(g[i]*g[i])
	}
	emit(0, g)
	return loss, nil
}

func pseudo(t *testing.T, c Compute, theta []float32, n int) ([]float32, float64) {
	t.Helper()
	out := make([]float32, len(theta))
	loss, err := c.Gradient(context.Background(), theta, 0, n, func(off int, v []float32) { copy(out[off:], v) })
	if err != nil {
		t.Fatal(err)
	}
	return out, loss
}

// TestLocalRoundsSGD: a round of h steps loads each step's samples at its
// place in the round (batches differing by at most one) and hands over
// θ_start − θ_h of h sgd steps, exactly as the steps written out.
func TestLocalRoundsSGD(t *testing.T) {
	q := &quadCompute{p: 3}
	c, err := LocalRounds(q, InnerOptimizer{Kind: "sgd", LR: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	theta := []float32{1, -2, 0.5}
	if err := c.Next(10, 3, 100); err != nil {
		t.Fatal(err)
	}
	got, loss := pseudo(t, c, theta, 10)
	if want := [][3]int64{{3, 1, 100}, {3, 1, 103}, {4, 1, 106}}; !slices.Equal(q.loads, want) {
		t.Fatalf("steps loaded %v, want %v", q.loads, want)
	}
	local := slices.Clone(theta)
	var wantLoss float64
	for _, c := range []float32{100, 103, 106} {
		for i := range local {
			g := local[i] - c
			wantLoss += 0.5 * float64(g*g)
			local[i] -= 0.25 * g
		}
	}
	for i := range got {
		if want := theta[i] - local[i]; got[i] != want {
			t.Fatalf("Δ[%d] = %g, want %g", i, got[i], want)
		}
	}
	if math.Abs(loss-wantLoss/3) > 1e-9 {
		t.Fatalf("loss %g, want the steps' mean %g", loss, wantLoss/3)
	}
	// Its own reading: every step asks for the compute's next batch.
	q.loads = nil
	if err := c.Next(8, 2, -1); err != nil {
		t.Fatal(err)
	}
	pseudo(t, c, theta, 8)
	if want := [][3]int64{{4, 1, -1}, {4, 1, -1}}; !slices.Equal(q.loads, want) {
		t.Fatalf("own reading loaded %v, want %v", q.loads, want)
	}
}

// TestLocalRoundsOneStepIsTheGradient: h = 1 passes through, and a round
// is never split.
func TestLocalRoundsOneStepIsTheGradient(t *testing.T) {
	q := &quadCompute{p: 2}
	c, _ := LocalRounds(q, InnerOptimizer{Kind: "sgd", LR: 0.5})
	if err := c.Next(64, 1, 7); err != nil {
		t.Fatal(err)
	}
	if got, _ := pseudo(t, c, []float32{8, 9}, 64); !slices.Equal(got, []float32{1, 2}) {
		t.Fatalf("h=1 gave %v, want the gradient [1 2]", got)
	}
	_ = c.Next(64, 4, 0)
	_, err := c.Gradient(context.Background(), []float32{0, 0}, 0, 30, func(int, []float32) {})
	if err == nil || !strings.Contains(err.Error(), "step boundary") {
		t.Fatalf("a round split inside a step: %v", err)
	}
	_, err = c.Gradient(context.Background(), []float32{0, 0}, 32, 64, func(int, []float32) {})
	if err == nil || !strings.Contains(err.Error(), "before its first") {
		t.Fatalf("a round's second part first: %v", err)
	}
	if _, err := LocalRounds(q, InnerOptimizer{Kind: "lamb", LR: 1}); err == nil {
		t.Fatal("unknown inner optimizer accepted")
	}
	if err := c.Next(2, 3, 0); err == nil {
		t.Fatal("a round of fewer samples than steps accepted")
	}
}

// TestLocalRoundsAdamKeepsItsMoments: Adam's first step moves every
// coordinate by about lr towards the minimum, and its state carries into
// the next round (a second round from the same θ hands over a different
// pseudo-gradient than a fresh Adam would).
func TestLocalRoundsAdamKeepsItsMoments(t *testing.T) {
	q := &quadCompute{p: 2}
	c, _ := LocalRounds(q, InnerOptimizer{Kind: "adam", LR: 0.01})
	theta := []float32{5, -5}
	_ = c.Next(4, 2, 0) // c = 0, then 2
	first, _ := pseudo(t, c, theta, 4)
	if first[0] <= 0 || first[1] >= 0 || math.Abs(float64(first[0])-0.02) > 1e-3 || math.Abs(float64(first[1])+0.02) > 1e-3 {
		t.Fatalf("two Adam steps of lr 0.01 towards 0 moved θ by %v", first)
	}
	_ = c.Next(4, 2, 0)
	second, _ := pseudo(t, c, theta, 4)
	fresh, _ := LocalRounds(&quadCompute{p: 2}, InnerOptimizer{Kind: "adam", LR: 0.01})
	_ = fresh.Next(4, 2, 0)
	again, _ := pseudo(t, fresh, theta, 4)
	if slices.Equal(second, again) || !slices.Equal(first, again) {
		t.Fatalf("Adam's state: first %v, second %v, fresh %v", first, second, again)
	}
}

// TestRoundSteps: a round is the job's batch × H in H steps; under the
// balance layer a share of n samples is taken in n / batch steps,
// rounded, at least 2 (a push of a round carries a pseudo-gradient); one
// step a push without local rounds.
func TestRoundSteps(t *testing.T) {
	q := &quadCompute{p: 1}
	w := &Worker{cfg: Config{Batch: 64, LocalSteps: 16}, compute: q}
	if n, a, err := w.next(0); err != nil || n != 1024 || a != nil || !slices.Equal(q.loads, [][3]int64{{1024, 16, -1}}) {
		t.Fatalf("next: %d samples, %v, loads %v", n, err, q.loads)
	}
	for n, want := range map[int]int{1024: 16, 100: 2, 96: 2, 160: 3, 3000: 47, 1: 1} {
		if got := w.steps(n); got != want {
			t.Errorf("a share of %d samples at batch 64: %d steps, want %d", n, got, want)
		}
	}
	w.cfg.LocalSteps = 1
	if got := w.steps(3000); got != 1 {
		t.Errorf("without local rounds: %d steps", got)
	}
	q.loads = nil
	if n, _, _ := w.next(0); n != 64 || !slices.Equal(q.loads, [][3]int64{{64, 1, -1}}) {
		t.Fatalf("without local rounds: %d samples, loads %v", n, q.loads)
	}
}

// TestProbeRounds: under the balance layer with local rounds, a round
// whose assignment carries no prediction (the balancer has not modelled
// the worker), or that has no assignment, is a probe of 2 steps of the
// job's batch from the share's position; one with a prediction takes its
// share; without local rounds the share is taken whole, prediction or not.
func TestProbeRounds(t *testing.T) {
	q := &quadCompute{p: 1}
	w := &Worker{cfg: Config{Batch: 64, LocalSteps: 16, Balance: true}, compute: q}
	blind := &shardapi.Assignment{Iter: 3, Batch: 1500, Pos: 4096}
	modelled := &shardapi.Assignment{Iter: 4, Batch: 1500, Pos: 8192, PredictNs: 9e8}
	small := &shardapi.Assignment{Iter: 5, Batch: 100, Pos: 9000}
	w.assigned = [4]*shardapi.Assignment{nil, blind, modelled, small}
	for _, c := range []struct {
		t     int64
		n, h  int
		loads [3]int64
	}{
		{2, 128, 2, [3]int64{128, 2, -1}},       // no assignment
		{3, 128, 2, [3]int64{128, 2, 4096}},     // blind: a probe from its share's position
		{4, 1500, 23, [3]int64{1500, 23, 8192}}, // modelled: the share
		{5, 100, 2, [3]int64{100, 2, 9000}},     // a share below a probe is taken whole
	} {
		q.loads = nil
		n, _, err := w.next(c.t)
		if err != nil || n != c.n || w.h != c.h || !slices.Equal(q.loads, [][3]int64{c.loads}) {
			t.Errorf("iteration %d: %d samples in %d steps (%v), loads %v; want %d in %d, %v", c.t, n, w.h, err, q.loads, c.n, c.h, c.loads)
		}
	}
	w.cfg.LocalSteps = 1
	q.loads = nil
	if n, _, _ := w.next(3); n != 1500 || !slices.Equal(q.loads, [][3]int64{{1500, 1, 4096}}) {
		t.Errorf("without local rounds a blind share is taken whole: %d samples, loads %v", n, q.loads)
	}
}

// TestLocalRoundsSplitCarriesProgress: a round split at a step boundary
// (the pipelined loop) runs its first steps from the θ before, carries
// their progress onto the θ the push brought, and hands over the whole
// round's pseudo-gradient from that θ; the step loads are those of the
// round taken whole. Boundary picks the split.
func TestLocalRoundsSplitCarriesProgress(t *testing.T) {
	whole, split := &quadCompute{p: 2}, &quadCompute{p: 2}
	cw, _ := LocalRounds(whole, InnerOptimizer{Kind: "sgd", LR: 0.25})
	cs, _ := LocalRounds(split, InnerOptimizer{Kind: "sgd", LR: 0.25})
	old, fresh := []float32{1, 2}, []float32{1.5, 1}
	if b := Boundary(12, 4, 5); b != 6 {
		t.Fatalf("boundary near sample 5 of 12 in 4 steps: %d, want 6", b)
	}
	_ = cs.Next(12, 4, 40)
	first, _ := pseudo(t, cs, old, 6) // [0, 6) on the θ before
	rest := make([]float32, 2)
	if _, err := cs.Gradient(context.Background(), fresh, 6, 12, func(off int, v []float32) { copy(rest[off:], v) }); err != nil {
		t.Fatal(err)
	}
	// Reference: two steps from old, then the same progress moved onto
	// fresh and two more steps.
	local := slices.Clone(old)
	for _, c := range []float32{40, 43} {
		for i := range local {
			local[i] -= 0.25 * (local[i] - c)
		}
	}
	for i := range first {
		if want := old[i] - local[i]; first[i] != want {
			t.Fatalf("first part Δ[%d] = %g, want %g", i, first[i], want)
		}
		local[i] = fresh[i] - first[i]
	}
	for _, c := range []float32{46, 49} {
		for i := range local {
			local[i] -= 0.25 * (local[i] - c)
		}
	}
	for i := range rest {
		if want := fresh[i] - local[i]; rest[i] != want {
			t.Fatalf("round Δ[%d] = %g, want %g", i, rest[i], want)
		}
	}
	_ = cw.Next(12, 4, 40)
	pseudo(t, cw, old, 12)
	if !slices.Equal(whole.loads, split.loads) {
		t.Fatalf("split loads %v, whole %v", split.loads, whole.loads)
	}
}

// TestLocalRoundsTrainTheGoModel: rounds of 4 inner sgd steps over the
// built-in MLP (ModelCompute, through Emulate as the node wraps it), each
// round's pseudo-gradient applied whole (outer sgd at 1, one worker),
// drive the synthetic data's loss from about 2 to a tenth of the first
// round's.
func TestLocalRoundsTrainTheGoModel(t *testing.T) {
	m, mc := goMLP(t, false)
	c, _ := LocalRounds(Emulate(mc, Emulation{Slowdown: 1, Batch: 16}), InnerOptimizer{Kind: "sgd", LR: 0.02})
	theta := m.Init(1)
	d := make([]float32, len(theta))
	var first, last float64
	for r := range 10 {
		if err := c.Next(64, 4, -1); err != nil {
			t.Fatal(err)
		}
		loss, err := c.Gradient(context.Background(), theta, 0, 64, func(off int, v []float32) { copy(d[off:], v) })
		if err != nil {
			t.Fatal(err)
		}
		for i := range theta {
			theta[i] -= d[i]
		}
		if r == 0 {
			first = loss
		}
		last = loss
	}
	if !(last < first/10) {
		t.Fatalf("loss %.4f in the first round, %.4f in the tenth", first, last)
	}
}

// notInPlace hides a Compute's InPlace (it has no Unwrap either), so
// LocalRounds keeps a gradient buffer and steps after each gradient.
type notInPlace struct{ Compute }

// TestLocalRoundsInPlaceEqualsBuffered: over ModelCompute (InPlace, also
// through Emulate) LocalRounds steps its copy piece by piece as the
// gradient forms and holds no gradient buffer; its rounds hand over the
// same pseudo-gradients as over the same compute taken whole (a buffered
// gradient, then the step), under sgd and under Adam across rounds, and
// split once at a step boundary.
func TestLocalRoundsInPlaceEqualsBuffered(t *testing.T) {
	for _, opt := range []InnerOptimizer{{Kind: "sgd", LR: 0.05}, {Kind: "adam", LR: 0.001}} {
		mk := func(wrap func(Compute) Compute) (Compute, *localRounds) {
			_, mc := goMLP(t, true)
			c, err := LocalRounds(wrap(Emulate(mc, Emulation{Slowdown: 1, Batch: 16})), opt)
			if err != nil {
				t.Fatal(err)
			}
			return c, c.(*localRounds)
		}
		inp, ri := mk(func(c Compute) Compute { return c })
		buf, rb := mk(func(c Compute) Compute { return notInPlace{c} })
		if !ri.inPlace || rb.inPlace {
			t.Fatalf("%s: in place %v over ModelCompute, %v over a compute that hides it", opt.Kind, ri.inPlace, rb.inPlace)
		}
		m, _ := cudaops.NewModel("mlp", cudaops.ModelOptions{Workers: 1})
		theta := m.Init(2)
		for r := range 3 {
			var got [2][]float32
			for i, c := range []Compute{inp, buf} {
				if err := c.Next(64, 4, int64(64*r)); err != nil {
					t.Fatal(err)
				}
				if r == 2 { // split at the second step's end
					pseudo(t, c, theta, 32)
					out := make([]float32, len(theta))
					if _, err := c.Gradient(context.Background(), theta, 32, 64, func(off int, v []float32) { copy(out[off:], v) }); err != nil {
						t.Fatal(err)
					}
					got[i] = out
				} else {
					got[i], _ = pseudo(t, c, theta, 64)
				}
			}
			for j := range got[0] {
				if d := math.Abs(float64(got[0][j] - got[1][j])); d > 1e-6*(1+math.Abs(float64(got[1][j]))) {
					t.Fatalf("%s round %d: value %d is %v stepped in place, %v buffered", opt.Kind, r, j, got[0][j], got[1][j])
				}
			}
			for j := range theta {
				theta[j] -= got[1][j]
			}
		}
		if ri.grad != nil || rb.grad == nil {
			t.Errorf("%s: gradient buffer %d values in place, %d buffered", opt.Kind, len(ri.grad), len(rb.grad))
		}
	}
}

// goMLP is the built-in MLP and a ModelCompute of it on the synthetic
// data, batch 16, seed 1.
func goMLP(t *testing.T, balance bool) (*cudaops.Model, *ModelCompute) {
	t.Helper()
	train, _, err := cudaops.LoadDataset("synthetic-mnist", "")
	if err != nil {
		t.Fatal(err)
	}
	m, err := cudaops.NewModel("mlp", cudaops.ModelOptions{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	mc, err := NewModelCompute(m, train, "w", 16, 1, balance)
	if err != nil {
		t.Fatal(err)
	}
	return m, mc
}
