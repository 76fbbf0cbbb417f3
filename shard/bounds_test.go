package shard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"dsspmesh/clock"
	"dsspmesh/shardapi"
)

// decaySpec is a shard of n values under the node's default schedule
// (0.85 every 60 000 samples) at a constant gate.
func decaySpec(n int) shardapi.Spec {
	s := testSpec(n, "asp")
	s.Optimizer.Schedule = shardapi.Schedule{LR: 0.01, Gamma: 0.85, StepSamples: 60000}
	return s
}

// TestSampleCountOverflowCannotBrickTheShard is the attack of a member
// that pushes zero gradients claiming 2^62 samples each: two of them used
// to wrap the replicated sample count negative, the schedule's rate became
// +Inf and every later push was refused non-finite-step, for good (the
// count is in every snapshot and the log replays it). The claims are now
// refused as out of the job's bounds, the count and the rate stay in
// their domain, an honest push after them is applied, and a replica
// restored from a snapshot or replaying the log decides alike.
func TestSampleCountOverflowCannotBrickTheShard(t *testing.T) {
	spec := decaySpec(4)
	h := newFSMHarness(t, spec, []float32{1, 2, 3, 4})
	log := [][]byte{}
	apply := func(data []byte, err error) shardapi.Applied {
		t.Helper()
		log = append(log, data)
		return h.apply(data, err)
	}
	apply(encodeWorker(entryAddWorker, "a", 0))
	zero := gradBytes(make([]float32, 4))
	for i := range int64(2) {
		apply(encodePushes([]Push{{PushMeta: meta("a", i, 1<<62), Grad: zero}}))
	}
	st := h.f.Status()
	if st.Samples < 0 {
		t.Errorf("the global sample count wrapped: %d", st.Samples)
	}
	if r := spec.Optimizer.Schedule.Rate(st.Samples); math.IsInf(r, 0) || math.IsNaN(r) {
		t.Errorf("rate after %d samples is %g", st.Samples, r)
	}
	// The honest worker goes on at its clock.
	c, _ := h.f.st.gate.g.Clock("a")
	a := apply(encodePushes([]Push{{PushMeta: meta("a", c, 32), Grad: gradBytes([]float32{1, 1, 1, 1})}}))
	if !a.Pushes[0].Applied {
		t.Fatalf("an honest push after the attack: %v", a.Pushes[0].Err)
	}
	want := h.f.StateHash()

	// Replay of the whole log on a fresh replica.
	r := newFSMHarness(t, spec, []float32{1, 2, 3, 4})
	for _, b := range log {
		r.apply(b, nil)
	}
	if r.f.StateHash() != want {
		t.Fatal("a replica replaying the log disagrees")
	}
	// Restore from a snapshot, then one more honest push on both.
	g := NewFSM(spec.Shard, nil)
	if err := g.Restore(nopCloser{bytes.NewReader(snapshotBytes(t, h.f))}); err != nil {
		t.Fatal(err)
	}
	next := encodePushesOrDie(t, []Push{{PushMeta: meta("a", c+1, 32), Grad: gradBytes([]float32{1, 1, 1, 1})}})
	a = h.apply(next, nil)
	b := g.Apply(&raft.Log{Index: h.index, Type: raft.LogCommand, Data: next}).(shardapi.Applied)
	if !a.Pushes[0].Applied || !b.Pushes[0].Applied {
		t.Fatalf("after restore: %v / %v", a.Pushes[0].Err, b.Pushes[0].Err)
	}
	if h.f.StateHash() != g.StateHash() {
		t.Fatal("the restored replica disagrees")
	}
}

func encodePushesOrDie(t *testing.T, ps []Push) []byte {
	t.Helper()
	b, err := encodePushes(ps)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCountersSaturate: a replicated count at its bound stays there; the
// schedule's rate stays finite at the saturated count and at a negative
// one (a snapshot written by a build whose count wrapped recovers).
func TestCountersSaturate(t *testing.T) {
	spec := decaySpec(2)
	h := newFSMHarness(t, spec, []float32{0, 0})
	h.apply(encodeWorker(entryAddWorker, "a", 0))
	h.f.st.tally.samples, h.f.st.tally.pushes = math.MaxInt64-10, math.MaxUint64
	a := h.apply(encodePushes([]Push{{PushMeta: meta("a", 0, 32), Grad: gradBytes([]float32{1, 1})}}))
	if !a.Pushes[0].Applied {
		t.Fatal(a.Pushes[0].Err)
	}
	st := h.f.Status()
	if st.Samples != math.MaxInt64 || st.Pushes != math.MaxUint64 {
		t.Fatalf("samples %d, pushes %d: want both saturated", st.Samples, st.Pushes)
	}
	sch := spec.Optimizer.Schedule
	for _, n := range []int64{math.MinInt64, -1, 0, 1 << 40, math.MaxInt64} {
		if r := sch.Rate(n); math.IsNaN(r) || r < 0 || r > sch.LR {
			t.Errorf("rate after %d samples: %g, want in [0, %g]", n, r, sch.LR)
		}
	}
	if r := sch.Rate(-1); r != sch.LR {
		t.Errorf("rate at a negative count %g, want the initial %g", r, sch.LR)
	}
	h.f.st.tally.samples = -5 // as restored from a snapshot of a count that wrapped
	a = h.apply(encodePushes([]Push{{PushMeta: meta("a", 1, 32), Grad: gradBytes([]float32{1, 1})}}))
	if !a.Pushes[0].Applied {
		t.Fatalf("a push at a negative count: %v", a.Pushes[0].Err)
	}
	if got := satMulAdd(1, math.MaxInt64/2, 3); got != math.MaxInt64 {
		t.Errorf("satMulAdd overflow: %d", got)
	}
}

// TestAddWorkerClockBounded: an AddWorker from a clock beyond
// shardapi.MaxIter is refused by the leader before it is proposed and by
// every replica as it applies one, so no clock approaches the wrap of
// int64 (a worker's clock + 1, t_max + lead, a data position).
func TestAddWorkerClockBounded(t *testing.T) {
	h := newFSMHarness(t, testSpec(2, "asp"), []float32{0, 0})
	a := h.apply(encodeWorker(entryAddWorker, "a", math.MaxInt64))
	var rej *shardapi.RejectError
	if !errors.As(a.Err, &rej) || rej.Reason != shardapi.ReasonOutOfBounds {
		t.Fatalf("AddWorker from MaxInt64: %+v", a)
	}
	if _, ok := h.f.st.gate.g.Clock("a"); ok {
		t.Fatal("the worker was added")
	}
	if a := h.apply(encodeWorker(entryAddWorker, "a", shardapi.MaxIter)); a.Err != nil || a.StartClock != shardapi.MaxIter {
		t.Fatalf("AddWorker at the bound: %+v", a)
	}

	// A member asking for it is refused by name, and nothing is proposed.
	c := newCluster(t, 11)
	ids := c.bootZeros(1, 2, "asp")
	leader := c.waitLeader("")
	before := leader.FSM().AppliedIndex()
	_, err := c.client("mallory", ids).AddWorker(context.Background(), math.MaxInt64)
	wantReason(t, "AddWorker from MaxInt64 at the service", err, shardapi.ReasonOutOfBounds)
	if got := leader.FSM().AppliedIndex(); got != before {
		t.Errorf("applied index %d → %d: the refused AddWorker was proposed", before, got)
	}
}

// TestExtremeGradientRefusedByDefault is the attack of a member that
// pushes one finite but extreme gradient (3e38, or 1e4, in every value):
// applied, it destroyed the model. As the shard's first push 3e38 is
// refused by every replica's step check (a parameter would reach 2^64).
// Under a spec that names no outlier factor the leader refuses both as
// norm outliers once the shard has seen minNormSamples honest pushes, and
// a gradient on a push of no samples is refused whatever its size; the
// parameters stay the honest pushes'.
func TestExtremeGradientRefusedByDefault(t *testing.T) {
	const n = 16
	c := newCluster(t, 9)
	ids := c.bootZeros(1, n, "asp")
	honest, mallory := c.client("w1", ids), c.client("mallory", ids)
	for _, cl := range []*shardapi.Client{honest, mallory} {
		if _, err := cl.AddWorker(context.Background(), 0); err != nil {
			t.Fatal(err)
		}
	}
	fill := func(x float32) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = x
		}
		return v
	}
	// Before any history the outlier rule cannot judge; the step's
	// domain (no parameter at ±2^64 or beyond) refuses 3e38 on every replica.
	_, err := mallory.Push(context.Background(), shardapi.Push{Iter: 0, Samples: 32, ComputeNs: 1, Payload: mallory.Encode(fill(3e38), 32)})
	wantReason(t, "3e38 in every value as the shard's first push", err, shardapi.ReasonNonFiniteStep)
	var params []float32
	for i := range int64(minNormSamples) {
		r, err := honest.Push(context.Background(), shardapi.Push{Iter: i, Samples: 32, ComputeNs: 1, Payload: honest.Encode(gradFor("w1", i, n), 32)})
		if err != nil {
			t.Fatalf("honest push %d: %v", i, err)
		}
		params = r.Params
	}
	for _, a := range []struct {
		name    string
		grad    []float32
		samples int64
		want    shardapi.Reason
	}{
		{"3e38 in every value", fill(3e38), 32, shardapi.ReasonOutlier},
		{"1e4 in every value", fill(1e4), 32, shardapi.ReasonOutlier},
		{"1e4 in every value, no samples", fill(1e4), 0, shardapi.ReasonOutOfBounds},
		{"one value of 1e-3, no samples", append(fill(0)[:n-1], 1e-3), 0, shardapi.ReasonOutOfBounds},
	} {
		_, err := mallory.Push(context.Background(), shardapi.Push{Iter: 0, Samples: a.samples, ComputeNs: 1, Payload: mallory.Encode(a.grad, a.samples)})
		wantReason(t, a.name, err, a.want)
	}
	leader := c.waitLeader("")
	if got := leader.FSM().Params(nil); !slices.Equal(got, params) {
		t.Fatalf("parameters moved by refused pushes: %v, want %v", got, params)
	}
	if r := leader.Status().Service.Refused["mallory"]; r.Outliers != 4 {
		t.Errorf("mallory's refusals: %+v", r)
	}
	// The zero push of a join is a fetch, not refused.
	if _, err := mallory.Push(context.Background(), shardapi.Push{Iter: 0, Payload: mallory.Encode(make([]float32, n), 0)}); err != nil {
		t.Fatalf("a join's zero push: %v", err)
	}
}

// TestOutlierRuleRefusesNoHonestPush feeds the default outlier rule the
// recorded norms of an honest run (testdata/honest_norms.txt, written by
// testdata/honestnorms: the MLP on MNIST, four workers three steps stale,
// 800 pushes a scenario, at a fixed batch and at balance's batches of 8
// to 152) on each of three shards, each with its own leader's window:
// none is refused. The highest ratio of a push's norm to the recent
// median is logged; it is far below DefaultOutlierFactor. After each
// history a push of 1e4 in every value is refused. DSSP_HONEST_NORMS names
// another recording of testdata/honestnorms to read instead.
func TestOutlierRuleRefusesNoHonestPush(t *testing.T) {
	path, other := os.LookupEnv("DSSP_HONEST_NORMS")
	if !other {
		path = "testdata/honest_norms.txt"
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type push struct {
		samples int64
		norms   []float64
	}
	runs := map[string][]push{}
	var name string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if n, ok := strings.CutPrefix(l, "# "); ok {
			name = n
			continue
		}
		f := strings.Fields(l)
		var p push
		p.samples, _ = strconv.ParseInt(f[0], 10, 64)
		for _, x := range f[1:] {
			v, err := strconv.ParseFloat(x, 64)
			if err != nil {
				t.Fatal(err)
			}
			p.norms = append(p.norms, v)
		}
		runs[name] = append(runs[name], p)
	}
	if !other && (len(runs["fixed"]) != 800 || len(runs["balance"]) != 800) {
		t.Fatalf("recorded runs: %d fixed, %d balance pushes", len(runs["fixed"]), len(runs["balance"]))
	}
	const n = 16
	vec := func(norm float64) []byte { return normBytes(n, norm) }
	for name, pushes := range runs {
		spec := testSpec(n, "asp")
		if name == "balance" {
			spec.BalanceBase = 64
		}
		weight := func(p push) float64 { return 1 }
		if spec.BalanceBase > 0 {
			weight = func(p push) float64 { return float64(p.samples) / float64(spec.BalanceBase) }
		}
		for s := range pushes[0].norms {
			h := newHygiene()
			refused, worst := 0, 0.0
			for i, p := range pushes {
				h.mu.Lock()
				med, ok := h.medianLocked()
				h.mu.Unlock()
				if ok {
					worst = max(worst, p.norms[s]*weight(p)/med)
				}
				if r, d := h.check(clock.WorkerID(fmt.Sprint("w", i%4)), spec, vec(p.norms[s]), p.samples, nil); r != 0 {
					refused++
					t.Errorf("%s shard %d push %d refused: %s %s", name, s, i, r, d)
				}
			}
			t.Logf("%s, shard %d: %d pushes, %d refused, highest norm / recent median %.2f (factor %g)", name, s, len(pushes), refused, worst, spec.Outlier())
			if r, _ := h.check("mallory", spec, vec(1e4*math.Sqrt(n)), 64, nil); r != shardapi.ReasonOutlier {
				t.Errorf("%s shard %d: 1e4 in every value: %s", name, s, r)
			}
		}
	}
}

// TestSamplesBoundedByTheJobsBatch: a spec that names the job's batch
// bounds a push's samples by it (without the balance layer); under the
// balance layer the bound is MaxBalanceWorkers × the base batch.
func TestSamplesBoundedByTheJobsBatch(t *testing.T) {
	spec := testSpec(2, "asp")
	spec.Batch = 8
	h := newFSMHarness(t, spec, []float32{0, 0})
	h.apply(encodeWorker(entryAddWorker, "a", 0))
	g := gradBytes([]float32{1, 1})
	a := h.apply(encodePushes([]Push{{PushMeta: meta("a", 0, 9), Grad: g}}))
	wantReason(t, "9 samples in a job of batch 8", a.Pushes[0].Err, shardapi.ReasonOutOfBounds)
	if a := h.apply(encodePushes([]Push{{PushMeta: meta("a", 0, 8), Grad: g}})); !a.Pushes[0].Applied {
		t.Fatalf("8 samples: %v", a.Pushes[0].Err)
	}

	spec.BalanceBase = 8
	h = newFSMHarness(t, spec, []float32{0, 0})
	h.apply(encodeWorker(entryAddWorker, "a", 0))
	if a := h.apply(encodePushes([]Push{{PushMeta: meta("a", 0, 8*shardapi.MaxBalanceWorkers), Grad: g}})); !a.Pushes[0].Applied {
		t.Fatalf("balance, the bound: %v", a.Pushes[0].Err)
	}
	a = h.apply(encodePushes([]Push{{PushMeta: meta("a", 1, 8*shardapi.MaxBalanceWorkers+1), Grad: g}}))
	wantReason(t, "balance, one above the bound", a.Pushes[0].Err, shardapi.ReasonOutOfBounds)
}

// TestJoinsZeroPushPassesInEveryPrecision: a worker's fetch (a push of no
// samples with the encoder's zero payload, node/worker/push.go) is applied in
// every wire precision, so the zero-gradient rule refuses no join.
func TestJoinsZeroPushPassesInEveryPrecision(t *testing.T) {
	for _, p := range []shardapi.Precision{shardapi.FP32, shardapi.BF16, shardapi.INT8, shardapi.INT4} {
		spec := testSpec(300, "asp")
		spec.Precision = p
		h := newFSMHarness(t, spec, make([]float32, 300))
		h.apply(encodeWorker(entryAddWorker, "a", 0))
		zero := shardapi.NewEncoder(p, 300).Zero()
		if r, d := newHygiene().check("a", spec, zero, 0, nil); r != 0 {
			t.Errorf("%s: the leader refuses a join's zero push: %s %s", p, r, d)
		}
		if a := h.apply(encodePushes([]Push{{PushMeta: meta("a", 0, 0), Grad: zero}})); !a.Pushes[0].Applied {
			t.Errorf("%s: a join's zero push: %v", p, a.Pushes[0].Err)
		}
	}
}

// TestStepStaysInTheParametersDomain: a step that would bring a parameter
// or a velocity to ±2^64 (its square not finite in float32) is refused
// like a non-finite one; just below it is applied.
func TestStepStaysInTheParametersDomain(t *testing.T) {
	spec := testSpec(1, "asp")
	spec.Optimizer = shardapi.Optimizer{Kind: shardapi.SGD, Schedule: shardapi.Schedule{LR: 1, Gamma: 1}}
	h := newFSMHarness(t, spec, []float32{0})
	h.apply(encodeWorker(entryAddWorker, "a", 0))
	edge := float32(math.Ldexp(1, 64))
	below := math.Nextafter32(edge, 0)
	a := h.apply(encodePushes([]Push{{PushMeta: meta("a", 0, 1), Grad: gradBytes([]float32{edge})}}))
	wantReason(t, "a step to -2^64", a.Pushes[0].Err, shardapi.ReasonNonFiniteStep)
	if a := h.apply(encodePushes([]Push{{PushMeta: meta("a", 0, 1), Grad: gradBytes([]float32{below})}})); !a.Pushes[0].Applied {
		t.Fatalf("a step to just above -2^64: %v", a.Pushes[0].Err)
	}
	if !outOfDomain(float32(math.NaN())) || !outOfDomain(float32(math.Inf(-1))) || outOfDomain(-below) || !outOfDomain(-edge) {
		t.Error("outOfDomain's edges")
	}
}

// TestOutlierRuleRefusesNoHonestRound replays the pseudo-gradient norms of
// honest local rounds (testdata/honest_rounds.txt, recorded by
// testdata/honestnorms -local-rounds: four workers in synchronous rounds
// of 2 to 7 steps on synthetic-mnist, which converges to rounds that move
// θ by 1e-7 of its norm and now and then by 1e-4) on each of three
// shards under an outer rule, each push judged with the floor the leader
// gives a round (roundFloor × ‖θ‖ of the slice): none is refused. Judged
// as gradients are (no floor) the same rounds are refused, which is what
// the floor is for. After each history a round that moves the slice by
// 30 % of its norm (an inner optimizer diverging, as the same recording
// does at inner rate 0.3) and a push of 1e4 in every value are refused.
func TestOutlierRuleRefusesNoHonestRound(t *testing.T) {
	b, err := os.ReadFile("testdata/honest_rounds.txt")
	if err != nil {
		t.Fatal(err)
	}
	type push struct {
		samples       int64
		norms, thetas []float64
	}
	var pushes []push
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if strings.HasPrefix(l, "#") {
			continue
		}
		left, right, ok := strings.Cut(l, "|")
		f := strings.Fields(left)
		if !ok || len(f) != 4 || len(strings.Fields(right)) != 3 {
			t.Fatalf("line %q: want samples, three norms, | and three norms of θ", l)
		}
		var p push
		p.samples, _ = strconv.ParseInt(f[0], 10, 64)
		for i, x := range append(f[1:], strings.Fields(right)...) {
			v, err := strconv.ParseFloat(x, 64)
			if err != nil {
				t.Fatal(err)
			}
			if i < 3 {
				p.norms = append(p.norms, v)
			} else {
				p.thetas = append(p.thetas, v)
			}
		}
		pushes = append(pushes, p)
	}
	if len(pushes) != 1200 {
		t.Fatalf("recorded %d rounds, want 1200", len(pushes))
	}
	const n = 16
	vec := func(norm float64) []byte { return normBytes(n, norm) }
	spec := testSpec(n, "bsp")
	spec.Outer = shardapi.Outer{Kind: shardapi.OuterNesterov, LR: 0.7, Momentum: 0.9}
	for s := range 3 {
		withFloor, asGradients := newHygiene(), newHygiene()
		refused, refusedAsGradients, worst := 0, 0, 0.0
		for i, p := range pushes {
			w := clock.WorkerID(fmt.Sprint("w", i%4))
			if r, d := withFloor.check(w, spec, vec(p.norms[s]), p.samples, func() float64 { return roundFloor * p.thetas[s] }); r != 0 {
				refused++
				t.Errorf("shard %d round %d refused: %s %s", s, i, r, d)
			}
			if i >= minNormSamples {
				worst = max(worst, p.norms[s]/p.thetas[s])
			}
			if r, _ := asGradients.check(w, spec, vec(p.norms[s]), p.samples, nil); r != 0 {
				refusedAsGradients++
			}
		}
		t.Logf("shard %d: %d rounds, %d refused (%d without the floor), highest ‖Δ‖ / ‖θ‖ after the first %d %.2g (floor %g)",
			s, len(pushes), refused, refusedAsGradients, minNormSamples, worst, roundFloor)
		if refusedAsGradients == 0 {
			t.Errorf("shard %d: no round refused without the floor: the recording no longer shows what the floor is for", s)
		}
		theta := pushes[len(pushes)-1].thetas[s]
		if r, _ := withFloor.check("mallory", spec, vec(0.3*theta), 64, func() float64 { return roundFloor * theta }); r != shardapi.ReasonOutlier {
			t.Errorf("shard %d: a round of 0.3 ‖θ‖: %s", s, r)
		}
		if r, _ := withFloor.check("mallory", spec, vec(1e4*math.Sqrt(n)), 64, func() float64 { return roundFloor * theta }); r != shardapi.ReasonOutlier {
			t.Errorf("shard %d: 1e4 in every value: %s", s, r)
		}
	}
}

// normBytes is a gradient of n equal values whose norm is norm.
func normBytes(n int, norm float64) []byte {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(norm / math.Sqrt(float64(n)))
	}
	return gradBytes(v)
}
