package shard

import (
	"bytes"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"dsspmesh/clock"
	"dsspmesh/shardapi"
)

func outerSpec(n int, policy string, o shardapi.Outer) shardapi.Spec {
	s := testSpec(n, policy)
	s.Outer = o
	return s
}

var diloco = shardapi.Outer{Kind: shardapi.OuterNesterov, LR: 0.7, Momentum: 0.9}

func randVec(rng *rand.Rand, n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = (rng.Float32() - 0.5) * scale
	}
	return v
}

// addWorkers adds ws to h's gate at clock 0.
func addWorkers(t *testing.T, h *fsmHarness, ws ...clock.WorkerID) {
	t.Helper()
	for _, w := range ws {
		if a := h.apply(encodeWorker(entryAddWorker, w, 0)); a.Err != nil {
			t.Fatal(a.Err)
		}
	}
}

// pushOne applies w's push of iter with delta as its own entry and fails
// unless it was applied.
func pushOne(t *testing.T, h *fsmHarness, w clock.WorkerID, iter int64, delta []float32) {
	t.Helper()
	a := h.apply(encodePushes([]Push{{PushMeta: meta(w, iter, 64), Grad: gradBytes(delta)}}))
	if !a.Pushes[0].Applied {
		t.Fatalf("push (%s, %d) not applied: %v", w, iter, a.Pushes[0].Err)
	}
}

// TestOuterSyncRoundIsNesterovOnTheMean: under bsp, three workers' rounds
// (pushed one entry each, or two in one entry) move θ as DiLoCo's outer
// Nesterov on the round's mean pseudo-gradient does (a float64
// reference), and as one worker pushing that mean does.
func TestOuterSyncRoundIsNesterovOnTheMean(t *testing.T) {
	const n, rounds = 64, 6
	rng := rand.New(rand.NewPCG(1, 2))
	theta0 := randVec(rng, n, 2)
	many := newFSMHarness(t, outerSpec(n, "bsp", diloco), theta0)
	one := newFSMHarness(t, outerSpec(n, "bsp", diloco), theta0)
	addWorkers(t, many, "a", "b", "c")
	addWorkers(t, one, "solo")
	ref, m := make([]float64, n), make([]float64, n)
	for i, x := range theta0 {
		ref[i] = float64(x)
	}
	for r := range int64(rounds) {
		ds := [][]float32{randVec(rng, n, 0.1), randVec(rng, n, 0.1), randVec(rng, n, 0.1)}
		mean := make([]float32, n)
		for i := range mean {
			mean[i] = (ds[0][i] + ds[1][i] + ds[2][i]) / 3
			mu, mn := diloco.Momentum, float64(ds[0][i]+ds[1][i]+ds[2][i])/3
			m[i] = mu*m[i] + mn
			ref[i] -= diloco.LR * (mn + mu*m[i])
		}
		if r%2 == 0 {
			for k, w := range []clock.WorkerID{"a", "b", "c"} {
				pushOne(t, many, w, r, ds[k])
			}
		} else { // two arrivals in one entry, then the third
			a := many.apply(encodePushes([]Push{{PushMeta: meta("a", r, 64), Grad: gradBytes(ds[0])},
				{PushMeta: meta("b", r, 64), Grad: gradBytes(ds[1])}}))
			if !a.Pushes[0].Applied || !a.Pushes[1].Applied {
				t.Fatalf("round %d: %+v", r, a.Pushes)
			}
			pushOne(t, many, "c", r, ds[2])
		}
		pushOne(t, one, "solo", r, mean)
		if many.f.st.params.arrivals != 0 {
			t.Fatalf("round %d: %d arrivals left after a whole round", r, many.f.st.params.arrivals)
		}
	}
	got, solo := many.f.Params(nil), one.f.Params(nil)
	for i := range got {
		if d := math.Abs(float64(got[i]) - ref[i]); d > 1e-5 {
			t.Fatalf("θ[%d] = %g, Nesterov on the mean gives %g (|Δ| %g)", i, got[i], ref[i], d)
		}
		if d := math.Abs(float64(got[i] - solo[i])); d > 1e-5 {
			t.Fatalf("θ[%d] = %g with three workers, %g with one pushing their mean", i, got[i], solo[i])
		}
	}
}

// TestOuterSGDAveragesTheModels: outer sgd at rate 1 over a bsp round
// leaves θ at the mean of the workers' models θ_start − Δ_i.
func TestOuterSGDAveragesTheModels(t *testing.T) {
	const n = 16
	rng := rand.New(rand.NewPCG(3, 4))
	theta0 := randVec(rng, n, 2)
	h := newFSMHarness(t, outerSpec(n, "bsp", shardapi.Outer{Kind: shardapi.OuterSGD, LR: 1}), theta0)
	addWorkers(t, h, "a", "b", "c", "d")
	var local [4][]float32
	for k, w := range []clock.WorkerID{"a", "b", "c", "d"} {
		d := randVec(rng, n, 0.2)
		local[k] = make([]float32, n)
		for i := range d {
			local[k][i] = theta0[i] - d[i]
		}
		pushOne(t, h, w, 0, d)
	}
	got := h.f.Params(nil)
	for i := range got {
		avg := (float64(local[0][i]) + float64(local[1][i]) + float64(local[2][i]) + float64(local[3][i])) / 4
		if math.Abs(float64(got[i])-avg) > 1e-6 {
			t.Fatalf("θ[%d] = %g, the models' mean is %g", i, got[i], avg)
		}
	}
	if h.f.st.params.velocity != nil || h.f.stateBytes() != 4*n {
		t.Fatal("outer sgd keeps a momentum or a buffer")
	}
}

// TestDelayedNesterovMomentumOncePerNArrivals: under asp with N = 4
// workers arriving one at a time (workers repeat before others arrive, as
// bounded staleness allows), each arrival moves θ by exactly −(LR/N)·Δ in
// float32, except the N-th since the last momentum step, which also takes
// the momentum step once: the momentum at that arrival is μ·m + (the
// period's Δ)/N (a float64 reference with the period's arrivals in a
// buffer, as the rule is written in docs/design.md), and within a period
// the momentum vector is the one being formed, μ·m + (Δ so far)/N.
func TestDelayedNesterovMomentumOncePerNArrivals(t *testing.T) {
	const n = 8
	rng := rand.New(rand.NewPCG(5, 6))
	h := newFSMHarness(t, outerSpec(n, "asp", diloco), randVec(rng, n, 1))
	ws := []clock.WorkerID{"a", "b", "c", "d"}
	addWorkers(t, h, ws...)
	order := []clock.WorkerID{"a", "a", "b", "c", "a", "d", "b", "b", "c", "d", "a", "c"}
	iters := map[clock.WorkerID]int64{}
	a := float32(diloco.LR / 4)
	mEnd, buf := make([]float64, n), make([]float64, n) // the reference: momentum at a period's end, the period's Δ
	moves := 0
	for k, w := range order {
		d := randVec(rng, n, 0.1)
		theta := h.f.Params(nil)
		pushOne(t, h, w, iters[w], d)
		iters[w]++
		fired := (k+1)%4 == 0
		got := h.f.Params(nil)
		immediate := true
		for i := range got {
			buf[i] += float64(d[i])
			want := diloco.Momentum*mEnd[i] + buf[i]/4
			if m := float64(h.f.st.params.velocity[i]); math.Abs(m-want) > 1e-6 {
				t.Fatalf("arrival %d: m[%d] = %g, want μ·m + (period's Δ)/N = %g", k+1, i, m, want)
			}
			if got[i] != theta[i]-float32(a*d[i]) {
				immediate = false
			}
		}
		if !immediate {
			moves++
			if !fired {
				t.Fatalf("arrival %d moved θ by more than −(LR/N)·Δ", k+1)
			}
		} else if fired {
			t.Fatalf("arrival %d (the 4th since the last step) took no momentum step", k+1)
		}
		if fired {
			for i := range mEnd {
				mEnd[i], buf[i] = diloco.Momentum*mEnd[i]+buf[i]/4, 0
			}
		}
		if want := int64((k + 1) % 4); h.f.st.params.arrivals != want {
			t.Fatalf("arrival %d: count %d, want %d", k+1, h.f.st.params.arrivals, want)
		}
	}
	if moves != len(order)/4 {
		t.Fatalf("momentum moved θ %d times in %d arrivals of 4 workers", moves, len(order))
	}
}

// TestOuterZeroSamplesIsNoArrival: a push of no samples (a joiner's
// fetch) is not counted towards the momentum period.
func TestOuterZeroSamplesIsNoArrival(t *testing.T) {
	h := newFSMHarness(t, outerSpec(4, "asp", diloco), []float32{1, 2, 3, 4})
	addWorkers(t, h, "a", "b")
	a := h.apply(encodePushes([]Push{{PushMeta: meta("a", 0, 0), Grad: gradBytes(make([]float32, 4))}}))
	if !a.Pushes[0].Applied || h.f.st.params.arrivals != 0 {
		t.Fatalf("fetch: %+v, arrivals %d", a.Pushes[0], h.f.st.params.arrivals)
	}
}

// TestDefaultRuleIsTodaysStepBitForBit: with no outer rule (every job of
// one local step, by default) the FSM steps exactly as the momentum
// optimizer on the sum of an entry's gradients did before local rounds —
// checked against that rule written out here — and neither the spec nor
// the snapshot header carries a field local rounds added.
func TestDefaultRuleIsTodaysStepBitForBit(t *testing.T) {
	const n = 32
	rng := rand.New(rand.NewPCG(7, 8))
	spec := testSpec(n, "ssp:2")
	theta0 := randVec(rng, n, 1)
	h := newFSMHarness(t, spec, theta0)
	addWorkers(t, h, "a", "b")
	theta, vel := slices.Clone(theta0), make([]float32, n)
	lr32, mu := float32(spec.Optimizer.Schedule.LR), float32(spec.Optimizer.Momentum)
	for it := range int64(5) {
		ga, gb := randVec(rng, n, 1), randVec(rng, n, 1)
		a := h.apply(encodePushes([]Push{{PushMeta: meta("a", it, 64), Grad: gradBytes(ga)},
			{PushMeta: meta("b", it, 64), Grad: gradBytes(gb)}}))
		if !a.Pushes[0].Applied || !a.Pushes[1].Applied {
			t.Fatalf("iteration %d: %+v", it, a.Pushes)
		}
		for i := range theta { // the rule before local rounds, written out
			g := ga[i] + gb[i]
			v := float32(mu*vel[i]) + g
			vel[i] = v
			theta[i] -= float32(lr32 * v)
		}
	}
	got := h.f.Params(nil)
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(theta[i]) || math.Float32bits(h.f.st.params.velocity[i]) != math.Float32bits(vel[i]) {
			t.Fatalf("θ[%d] = %x v %x, the old rule gives %x v %x", i, got[i], h.f.st.params.velocity[i], theta[i], vel[i])
		}
	}
	if h.f.stateBytes() != 2*4*n || h.f.st.params.arrivals != 0 {
		t.Fatal("outer state without an outer rule")
	}
	for _, v := range []any{spec} {
		b, _ := msgpack.Marshal(v)
		var keys map[string]any
		if err := msgpack.Unmarshal(b, &keys); err != nil {
			t.Fatal(err)
		}
		if _, ok := keys["out"]; ok {
			t.Fatalf("a spec without local rounds encodes an outer field: %v", keys)
		}
	}
	head, err := h.f.st.head()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(head, []byte("\xa3arr")) {
		t.Fatal("the snapshot header of a job without local rounds names the outer arrivals")
	}
}

// TestOuterSnapshotContinuesIdentically: a snapshot taken in the middle
// of a momentum period (arrivals and buffer non-zero) restores a state
// that continues bit for bit; a snapshot whose count is out of bounds is
// refused.
func TestOuterSnapshotContinuesIdentically(t *testing.T) {
	const n = 8
	rng := rand.New(rand.NewPCG(9, 10))
	h := newFSMHarness(t, outerSpec(n, "asp", diloco), randVec(rng, n, 1))
	addWorkers(t, h, "a", "b", "c")
	pushOne(t, h, "a", 0, randVec(rng, n, 0.1))
	pushOne(t, h, "b", 0, randVec(rng, n, 0.1))
	raw := snapshotBytes(t, h.f)
	g := &fsmHarness{t: t, f: NewFSM(1, nil), index: h.index}
	if err := g.f.Restore(nopCloser{bytes.NewReader(raw)}); err != nil {
		t.Fatal(err)
	}
	if g.f.st.params.arrivals != 2 || g.f.StateHash() != h.f.StateHash() {
		t.Fatalf("restored: arrivals %d, hash equal %v", g.f.st.params.arrivals, g.f.StateHash() == h.f.StateHash())
	}
	for k := range 4 {
		d := randVec(rng, n, 0.1)
		w := []clock.WorkerID{"c", "a", "b", "c"}[k]
		it := []int64{0, 1, 1, 1}[k]
		pushOne(t, h, w, it, d)
		pushOne(t, g, w, it, d)
		if g.f.StateHash() != h.f.StateHash() {
			t.Fatalf("after push %d the restored FSM differs", k)
		}
	}
	// The same snapshot with its count set out of bounds is refused.
	i := bytes.Index(raw, []byte("\xa3arr"))
	if i < 0 {
		t.Fatal("snapshot header has no outer arrivals")
	}
	bad := slices.Clone(raw)
	bad[i+4] = 0xff // msgpack fixint −1
	if err := NewFSM(1, nil).Restore(nopCloser{bytes.NewReader(bad)}); err == nil {
		t.Fatal("a snapshot with outer arrivals −1 restored")
	}
}

// TestOuterSnapshotWithBufferIsFolded: a snapshot of an earlier build
// (version 1: the momentum at the last period's end and a buffer of the
// period's arrivals) taken in the middle of a period restores to the
// momentum this build forms, μ·m + b/N, and continues as the FSM that
// never stopped, up to float32 rounding.
func TestOuterSnapshotWithBufferIsFolded(t *testing.T) {
	const n = 8
	rng := rand.New(rand.NewPCG(11, 12))
	h := newFSMHarness(t, outerSpec(n, "asp", diloco), randVec(rng, n, 1))
	addWorkers(t, h, "a", "b", "c")
	for _, w := range []clock.WorkerID{"a", "b", "c"} {
		pushOne(t, h, w, 0, randVec(rng, n, 0.1))
	}
	mEnd := slices.Clone(h.f.st.params.velocity)
	da, db := randVec(rng, n, 0.1), randVec(rng, n, 0.1)
	pushOne(t, h, "a", 1, da)
	pushOne(t, h, "b", 1, db)
	buf := make([]float32, n)
	for i := range buf {
		buf[i] = da[i] + db[i]
	}
	head, err := h.f.st.head()
	if err != nil {
		t.Fatal(err)
	}
	head[len(snapshotMagic)] = snapshotWithBuffer
	v1 := append(slices.Clone(head), gradBytes(h.f.st.params.theta)...)
	v1 = append(v1, gradBytes(mEnd)...)
	v1 = append(v1, gradBytes(buf)...)
	g := &fsmHarness{t: t, f: NewFSM(1, nil), index: h.index}
	if err := g.f.Restore(nopCloser{bytes.NewReader(v1)}); err != nil {
		t.Fatal(err)
	}
	if g.f.st.params.arrivals != 2 {
		t.Fatalf("restored arrivals %d, want 2", g.f.st.params.arrivals)
	}
	for i := range mEnd {
		if d := math.Abs(float64(g.f.st.params.velocity[i] - h.f.st.params.velocity[i])); d > 1e-7 {
			t.Fatalf("m[%d] = %g folded, %g formed (|Δ| %g)", i, g.f.st.params.velocity[i], h.f.st.params.velocity[i], d)
		}
	}
	dc := randVec(rng, n, 0.1)
	pushOne(t, h, "c", 1, dc)
	pushOne(t, g, "c", 1, dc)
	want, got := h.f.Params(nil), g.f.Params(nil)
	for i := range got {
		if d := math.Abs(float64(got[i] - want[i])); d > 1e-6 {
			t.Fatalf("θ[%d] = %g after the period ended on the restored FSM, %g on the other", i, got[i], want[i])
		}
	}
	if g.f.st.params.arrivals != 0 {
		t.Fatalf("restored FSM's period did not end: %d arrivals", g.f.st.params.arrivals)
	}
	// A version-1 snapshot of the same state is longer by the buffer: the
	// same bytes labelled version 2 are refused.
	head[len(snapshotMagic)] = snapshotVersion
	copy(v1, head)
	if err := NewFSM(1, nil).Restore(nopCloser{bytes.NewReader(v1)}); err == nil {
		t.Fatal("a version-2 snapshot with a buffer after the momentum restored")
	}
}

// TestOuterStepCheckIsExact: a pseudo-gradient whose step would carry a
// parameter past ±2^64 is refused and changes nothing, under either rule.
func TestOuterStepCheckIsExact(t *testing.T) {
	for _, o := range []shardapi.Outer{diloco, {Kind: shardapi.OuterSGD, LR: 1}} {
		t.Run(o.Kind.String(), func(t *testing.T) {
			h := newFSMHarness(t, outerSpec(2, "asp", o), []float32{1, 1})
			addWorkers(t, h, "a")
			a := h.apply(encodePushes([]Push{{PushMeta: meta("a", 0, 64), Grad: gradBytes([]float32{0, -3e38})}}))
			if a.Pushes[0].Applied || a.Pushes[0].Err == nil {
				t.Fatalf("an extreme pseudo-gradient was applied: %+v", a.Pushes[0])
			}
			if got := h.f.Params(nil); got[0] != 1 || got[1] != 1 {
				t.Fatalf("refused push changed θ: %v", got)
			}
		})
	}
}

func TestOuterValidate(t *testing.T) {
	for _, c := range []struct {
		o  shardapi.Outer
		ok bool
	}{
		{shardapi.Outer{}, true},
		{diloco, true},
		{shardapi.Outer{Kind: shardapi.OuterSGD, LR: 1}, true},
		{shardapi.Outer{LR: 1}, false},
		{shardapi.Outer{Kind: shardapi.OuterSGD, LR: 1, Momentum: 0.5}, false},
		{shardapi.Outer{Kind: shardapi.OuterNesterov, LR: 0, Momentum: 0.5}, false},
		{shardapi.Outer{Kind: shardapi.OuterNesterov, LR: 1, Momentum: 1}, false},
		{shardapi.Outer{Kind: 9, LR: 1}, false},
	} {
		if err := c.o.Validate(); (err == nil) != c.ok {
			t.Errorf("%+v: %v", c.o, err)
		}
	}
}

// TestOuterGoldenCases are the cases docs/design.md ("Local rounds")
// lists: one parameter, θ = 1, each push its own entry.
func TestOuterGoldenCases(t *testing.T) {
	type arrival struct {
		w     clock.WorkerID
		delta float32
		theta float32 // θ after it
		m     float32 // momentum after it
	}
	for _, c := range []struct {
		name    string
		policy  string
		outer   shardapi.Outer
		workers []clock.WorkerID
		seq     []arrival
	}{
		{"bsp two rounds", "bsp", diloco, []clock.WorkerID{"a", "b"}, []arrival{
			{"a", 0.2, 0.93, 0.1}, {"b", 0.4, 0.601, 0.3}, {"a", 0.1, 0.566, 0.32}, {"b", 0.1, 0.2979, 0.37}}},
		{"asp a twice before b", "asp", diloco, []clock.WorkerID{"a", "b"}, []arrival{
			{"a", 0.2, 0.93, 0.1}, {"a", 0.2, 0.734, 0.2}, {"b", 0.4, 0.594, 0.38}}},
		{"sgd at 1 averages", "bsp", shardapi.Outer{Kind: shardapi.OuterSGD, LR: 1}, []clock.WorkerID{"a", "b", "c", "d"}, []arrival{
			{"a", 0.4, 0.9, 0}, {"b", 0.8, 0.7, 0}, {"c", 0, 0.7, 0}, {"d", -0.4, 0.8, 0}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newFSMHarness(t, outerSpec(1, c.policy, c.outer), []float32{1})
			addWorkers(t, h, c.workers...)
			iters := map[clock.WorkerID]int64{}
			for k, a := range c.seq {
				pushOne(t, h, a.w, iters[a.w], []float32{a.delta})
				iters[a.w]++
				th := h.f.Params(nil)[0]
				var m float32
				if h.f.st.params.velocity != nil {
					m = h.f.st.params.velocity[0]
				}
				if math.Abs(float64(th-a.theta)) > 1e-6 || math.Abs(float64(m-a.m)) > 1e-6 {
					t.Fatalf("arrival %d (%s, Δ %g): θ %g m %g, want θ %g m %g", k+1, a.w, a.delta, th, m, a.theta, a.m)
				}
			}
		})
	}
}

// TestOuterPseudoGradientsAreNotWeighted: under the balance layer an
// outer rule sums pseudo-gradients as they are — a round of twice the
// base samples has taken twice the steps already — where gradients are
// weighted by samples / BalanceBase.
func TestOuterPseudoGradientsAreNotWeighted(t *testing.T) {
	spec := outerSpec(2, "asp", shardapi.Outer{Kind: shardapi.OuterSGD, LR: 1})
	spec.BalanceBase = 64
	if spec.Weighted() {
		t.Fatal("an outer rule's pushes weighted")
	}
	h := newFSMHarness(t, spec, []float32{1, 1})
	addWorkers(t, h, "a", "b")
	a := h.apply(encodePushes([]Push{{PushMeta: meta("a", 0, 128), Grad: gradBytes([]float32{0.5, -0.5})}}))
	if !a.Pushes[0].Applied {
		t.Fatal(a.Pushes[0].Err)
	}
	if got := h.f.Params(nil); got[0] != 0.75 || got[1] != 1.25 {
		t.Fatalf("θ %v, want [0.75 1.25]: Δ/N, unweighted", got)
	}
	if s := testSpec(2, "asp"); func() bool { s.BalanceBase = 64; return !s.Weighted() }() {
		t.Fatal("gradients under the balance layer not weighted")
	}
}

// TestOneStepRulesSnapshotMidRound: under the rules that keep no momentum
// period (outer sgd, the combine rule's mean) a snapshot taken between a
// round's arrivals restores: their arrival count stays 0 (a count kept by
// an earlier build made every such snapshot unreadable, and a replica
// restarting from one could not start).
func TestOneStepRulesSnapshotMidRound(t *testing.T) {
	for _, o := range []shardapi.Outer{{Kind: shardapi.OuterMean, LR: 1}, {Kind: shardapi.OuterSGD, LR: 1}} {
		spec := testSpec(2, "asp")
		spec.Outer = o
		h := newFSMHarness(t, spec, []float32{1, 1})
		for _, w := range []clock.WorkerID{"a", "b", "c"} {
			h.apply(encodeWorker(entryAddWorker, w, 0))
		}
		h.apply(encodePushes([]Push{{PushMeta: meta("a", 0, 4), Grad: gradBytes([]float32{0.3, 0.3})}}))
		g := restored(t, snapshotBytes(t, h.f))
		if g.StateHash() != h.f.StateHash() {
			t.Fatalf("%s: the restored state differs", o.Kind)
		}
		if got := g.Params(nil); got[0] != 1-float32(0.3/3) {
			t.Fatalf("%s: θ %v, want 1 − 0.3/3", o.Kind, got)
		}
	}
}
