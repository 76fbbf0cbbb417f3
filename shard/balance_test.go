package shard

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"dsspmesh/clock"
	"dsspmesh/shardapi"
)

// TestSampleWeightedApplyIsOneStepOnTheUnion: a BSP round of four pushes
// with batches 47/47/23/11 (each the mean gradient of its worker's
// samples), with the balance layer on (base 32), moves the parameters as
// one process's step on the union of the 128 samples at 128/32 times the
// learning rate — the mesh's rate per base batch. The same pushes without
// weighting (1/n per worker, what an unbalanced mesh does) do not.
func TestSampleWeightedApplyIsOneStepOnTheUnion(t *testing.T) {
	const n, base = 64, 32
	batches := []int64{47, 47, 23, 11}
	rng := rand.New(rand.NewPCG(4, 2))
	var perSample [][]float64 // one gradient per sample
	for range 128 {
		g := make([]float64, n)
		for j := range g {
			g[j] = rng.NormFloat64()
		}
		perSample = append(perSample, g)
	}
	theta := make([]float32, n)
	for j := range theta {
		theta[j] = float32(rng.NormFloat64())
	}
	union := make([]float64, n)
	for _, g := range perSample {
		for j := range g {
			union[j] += g[j] / 128
		}
	}
	run := func(balanceBase int64) []float32 {
		spec := testSpec(n, "bsp")
		spec.BalanceBase = balanceBase
		spec.Optimizer = shardapi.Optimizer{Kind: shardapi.SGD, Schedule: shardapi.Schedule{LR: 0.01, Gamma: 1}}
		h := newFSMHarness(t, spec, theta)
		var pushes []Push
		off := 0
		for i, b := range batches {
			w := clock.WorkerID(fmt.Sprintf("w%d", i))
			if a := h.apply(encodeWorker(entryAddWorker, w, 0)); a.Err != nil {
				t.Fatal(a.Err)
			}
			mean := make([]float32, n)
			for _, g := range perSample[off : off+int(b)] {
				for j := range g {
					mean[j] += float32(g[j] / float64(b))
				}
			}
			off += int(b)
			pushes = append(pushes, Push{PushMeta: meta(w, 0, b), Grad: gradBytes(mean)})
		}
		for _, p := range pushes { // one entry per push, as workers arrive
			if a := h.apply(encodePushes([]Push{p})); a.Pushes[0].Err != nil {
				t.Fatal(a.Pushes[0].Err)
			}
		}
		return h.f.Params(nil)
	}
	lr := 0.01 * 128 / base
	var errW, errU, scale float64
	weighted, unweighted := run(base), run(0)
	for j := range theta {
		want := float64(theta[j]) - lr*union[j]
		errW = math.Max(errW, math.Abs(float64(weighted[j])-want))
		errU = math.Max(errU, math.Abs(float64(unweighted[j])-want))
		scale = math.Max(scale, math.Abs(lr*union[j]))
	}
	if errW > 1e-4*scale {
		t.Fatalf("weighted round differs from one step on the union by %g (step size %g)", errW, scale)
	}
	if errU < 1e-2*scale {
		t.Fatalf("the unweighted control matches too (%g): the test cannot tell", errU)
	}
	t.Logf("max |Δ| from one step on the union: weighted %.2g, unweighted %.2g (step %.2g)", errW, errU, scale)
}

// TestShardZeroAllocatesAsReplicatedState drives shard 0 through rounds of
// pushes whose compute_ns follow speeds 1,1,2,4: the allocation converges
// to 47/47/23/11 of 128, each round's data positions tile the global
// batch, a snapshot restored at any round answers identically, and a
// removed worker's share goes to the others.
func TestShardZeroAllocatesAsReplicatedState(t *testing.T) {
	spec := testSpec(4, "ssp:1")
	spec.Shard, spec.BalanceBase = 0, 32
	h := newFSMHarness(t, spec, make([]float32, 4))
	ids := []clock.WorkerID{"a", "b", "c", "d"}
	per := []int64{1000, 1000, 2000, 4000} // ns per sample
	for _, w := range ids {
		if a := h.apply(encodeWorker(entryAddWorker, w, 0)); a.Err != nil {
			t.Fatal(a.Err)
		}
	}
	batch := map[clock.WorkerID]int64{}
	for _, w := range ids {
		batch[w] = 32
	}
	var restored *FSM
	for it := int64(0); it < 60; it++ {
		var ps []Push
		for _, w := range slices.Backward(ids) {
			b := batch[w]
			m := meta(w, it, b)
			m.ComputeNs = per[slices.Index(ids, w)] * b
			ps = append(ps, Push{PushMeta: m, Grad: gradBytes(make([]float32, 4))})
		}
		h.apply(encodePushes(ps))
		// Every worker's assignment for iteration it+1, and the tiling.
		var pos []int64
		var sum, global int64
		for _, w := range ids {
			a := assignmentOf(t, h.f, restored, w, it)
			batch[w], global = a.Batch, a.Global
			pos = append(pos, a.Pos)
			sum += a.Batch
		}
		// Iteration 0 is the join's, with no samples: iteration t reads
		// from position (t−1)·128.
		if sum != 128 || global != 128 || pos[0] != it*128 {
			t.Fatalf("iteration %d: Σ %d, global %d, first position %d; want 128, 128, %d", it+1, sum, global, pos[0], it*128)
		}
		for i := 1; i < len(ids); i++ {
			if pos[i] != pos[i-1]+batch[ids[i-1]] {
				t.Fatalf("iteration %d: positions %v do not tile batches %v", it+1, pos, batch)
			}
		}
		if it == 20 { // a new replica from a snapshot, fed the same entries from here
			restored = NewFSM(0, nil)
			if err := restored.Restore(nopCloser{bytes.NewReader(snapshotBytes(t, h.f))}); err != nil {
				t.Fatal(err)
			}
			if restored.StateHash() != h.f.StateHash() {
				t.Fatal("restored state hash differs")
			}
		}
		if restored != nil && it > 20 {
			restored.Apply(&raft.Log{Index: h.index, Type: raft.LogCommand, Data: mustEncode(t, ps)})
		}
	}
	if got := []int64{batch["a"], batch["b"], batch["c"], batch["d"]}; !slices.Equal(got, []int64{47, 47, 23, 11}) {
		t.Fatalf("converged to %v, want 47 47 23 11", got)
	}
	if restored.StateHash() != h.f.StateHash() {
		t.Fatal("restored replica diverged")
	}
	h.apply(encodeWorker(entryRemoveWorker, "a", 0))
	var sum int64
	for _, w := range ids[1:] {
		a, _ := h.f.assignments(w, 60)
		sum += a.Batch
	}
	if sum != 128 {
		t.Fatalf("after a left: Σ %d, want the global batch 128", sum)
	}
}

// TestSuspendedWorkersShareGoesToTheOthers suspends a worker the way the
// leader does when it falls silent (a kill -9, before gossip notices): its
// share of the global batch goes to the others from the next version on,
// as after a removal, so the mesh keeps training on B samples a round and
// no slice of the data order goes unread for the suspension's length.
func TestSuspendedWorkersShareGoesToTheOthers(t *testing.T) {
	h, ids := balancedSSP1(t)
	push := func(it int64, ws ...clock.WorkerID) {
		var ps []Push
		for _, w := range ws {
			m := meta(w, it, 32)
			m.ComputeNs = 32_000
			ps = append(ps, Push{PushMeta: m, Grad: gradBytes(make([]float32, 4))})
		}
		h.apply(encodePushes(ps))
	}
	for it := int64(0); it < 5; it++ {
		push(it, ids...)
	}
	// a goes silent at 5; the others run ahead until they are held.
	push(5, ids[1:]...)
	push(6, ids[1:]...)
	if a := h.apply(encodeSuspend("a", 5)); a.Kind != "remove-worker" || !a.Suspected {
		t.Fatalf("suspension of a at t_min with the others held: %+v", a)
	}
	var sum int64
	for _, w := range ids[1:] {
		a, _ := h.f.assignments(w, 7)
		if a == nil {
			t.Fatalf("%s has no assignment for iteration 8", w)
		}
		sum += a.Batch
	}
	if sum != 128 {
		t.Fatalf("after a was suspended: Σ %d for iteration 8, want the global batch 128", sum)
	}
	if a, _ := h.f.assignments("a", 7); a != nil {
		t.Fatalf("suspended a still assigned %+v", a)
	}
}

// TestPipelinedAssignmentsAreFinalWhenNamed runs shard 0 of a pipelined
// job (ssp:2, gate ssp:1) with workers of speeds 1,1,2,4 pushing as the
// gate lets them, one push per entry: every assignment an OK names (for
// iter+1, and ahead for iter+2) is the one any later OK names for that
// iteration, and the slices of every round with one version tile its
// global batch.
func TestPipelinedAssignmentsAreFinalWhenNamed(t *testing.T) {
	spec := testSpec(4, "ssp:2")
	spec.Shard, spec.BalanceBase, spec.Pipeline = 0, 32, true
	h := newFSMHarness(t, spec, make([]float32, 4))
	ids := []clock.WorkerID{"a", "b", "c", "d"}
	per := []int64{1000, 1000, 2000, 4000} // ns per sample
	next := map[clock.WorkerID]int64{}
	batch := map[clock.WorkerID]int64{}
	for _, w := range ids {
		if a := h.apply(encodeWorker(entryAddWorker, w, 0)); a.Err != nil {
			t.Fatal(a.Err)
		}
		batch[w] = 32
	}
	type key struct {
		w clock.WorkerID
		t int64
	}
	named := map[key]shardapi.Assignment{}
	name := func(a *shardapi.Assignment, w clock.WorkerID, iter int64) {
		if a == nil {
			return
		}
		if a.Iter != iter {
			t.Fatalf("%s: assignment for iteration %d says %d", w, iter, a.Iter)
		}
		if old, ok := named[key{w, iter}]; ok && old != *a {
			t.Fatalf("%s iteration %d: named %+v, later %+v", w, iter, old, *a)
		}
		named[key{w, iter}] = *a
	}
	// Worker i gets a turn with probability 1000/per[i] per step, in a
	// random order; it pushes when its previous push was released (the
	// gate refuses one while it waits).
	// Every 250 steps the speeds rotate among the workers, so that the
	// balancer keeps re-allocating.
	r := rand.New(rand.NewPCG(7, 16))
	for step := int64(0); step < 3000; step++ {
		if step > 0 && step%250 == 0 {
			per = append(per[1:], per[0])
		}
		for _, i := range r.Perm(len(ids)) {
			w := ids[i]
			if r.Int64N(per[i]/1000) != 0 {
				continue
			}
			it := next[w]
			if it > 0 {
				if st, _, _ := h.f.replyFor(w, it-1, false); st != replyOK {
					continue
				}
			}
			m := meta(w, it, batch[w])
			m.ComputeNs = per[i] * batch[w]
			if a := h.apply(encodePushes([]Push{{PushMeta: m, Grad: gradBytes(make([]float32, 4))}})); a.Pushes[0].Err != nil {
				t.Fatal(a.Pushes[0].Err)
			}
			next[w] = it + 1
		}
		// Every OK the shard would send now names the same assignments.
		for _, w := range ids {
			it := next[w] - 1
			if st, _, _ := h.f.replyFor(w, it, false); it < 0 || st != replyOK {
				continue
			}
			a, ahead := h.f.assignments(w, it)
			if ahead == nil {
				t.Fatalf("%s push %d: no assignment ahead under Pipeline", w, it)
			}
			name(a, w, it+1)
			name(ahead, w, it+2)
			if a != nil && a.Pos >= 0 {
				batch[w] = a.Batch // what the worker computes it+1 on
			}
		}
	}
	rounds := 0
	for t0 := int64(1); t0 <= next["d"]; t0++ {
		var as []shardapi.Assignment
		for _, w := range ids {
			if a, ok := named[key{w, t0}]; ok && a.Pos >= 0 {
				as = append(as, a)
			}
		}
		if len(as) < len(ids) || as[0].Version != as[len(as)-1].Version {
			continue
		}
		rounds++
		var sum int64
		for i, a := range as {
			sum += a.Batch
			if i > 0 && a.Pos != as[i-1].Pos+as[i-1].Batch {
				t.Fatalf("iteration %d: positions do not tile: %+v", t0, as)
			}
		}
		if sum != as[0].Global {
			t.Fatalf("iteration %d: Σ %d, global %d", t0, sum, as[0].Global)
		}
	}
	if st := h.f.st.bal.b.Stats(); rounds < 100 || st.Moves < 10 {
		t.Fatalf("only %d full rounds and %+v", rounds, st)
	}
	t.Logf("%d full rounds, %+v", rounds, h.f.st.bal.b.Stats())
}

func mustEncode(t *testing.T, ps []Push) []byte {
	t.Helper()
	b, err := encodePushes(ps)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRemovingTheFastestKeepsTheSharesItWasNamed removes the worker whose
// clock is the gate's t_max just after an OK named its share of the next
// iteration. The new allocation must come in force after that iteration:
// the gate's t_max falls with the removal, and a version from the lowered
// t_max+1 would cut the others' shares of an iteration the removed worker
// may already have computed and pushed (an acknowledged push of a worker
// the shards then remove), so two workers would read the same samples — what
// a 10-minute chaos run with --balance caught (shares overlapping 4).
func TestRemovingTheFastestKeepsTheSharesItWasNamed(t *testing.T) {
	h, ids := balancedSSP1(t)
	type key struct {
		w clock.WorkerID
		t int64
	}
	named := map[key]shardapi.Assignment{}
	push := func(it int64, ws ...clock.WorkerID) {
		t.Helper()
		for _, w := range ws {
			m := meta(w, it, 32)
			m.ComputeNs = 32_000
			if a := h.apply(encodePushes([]Push{{PushMeta: m, Grad: gradBytes(make([]float32, 4))}})); a.Pushes[0].Err != nil {
				t.Fatal(a.Pushes[0].Err)
			}
			if st, _, _ := h.f.replyFor(w, it, false); st != replyOK {
				continue
			}
			if a, _ := h.f.assignments(w, it); a != nil && a.Pos >= 0 {
				named[key{w, it + 1}] = *a
			}
		}
	}
	for it := int64(0); it < 5; it++ {
		push(it, ids...)
	}
	// a runs one ahead: its OK of push 5 names its share of iteration 6
	// while the others' clocks are 5; then the shards remove it.
	push(5, "a")
	if _, ok := named[key{"a", 6}]; !ok {
		t.Fatal("a's push 5 was not answered with its share of iteration 6")
	}
	if a := h.apply(encodeWorker(entryRemoveWorker, "a", 0)); a.Err != nil {
		t.Fatal(a.Err)
	}
	for it := int64(5); it < 9; it++ {
		push(it, ids[1:]...)
	}
	for it := int64(1); it <= 9; it++ {
		var as []shardapi.Assignment
		for _, w := range ids {
			if a, ok := named[key{w, it}]; ok {
				as = append(as, a)
			}
		}
		slices.SortFunc(as, func(x, y shardapi.Assignment) int { return int(x.Pos - y.Pos) })
		for i := 1; i < len(as); i++ {
			if as[i].Version != as[0].Version || as[i].Pos < as[i-1].Pos+as[i-1].Batch {
				t.Fatalf("iteration %d: shares overlap or come from two allocations: %+v", it, as)
			}
		}
	}
	if a, ok := named[key{"b", 8}]; !ok || a.Batch <= 32 {
		t.Fatalf("b's share of iteration 8 after a left: %+v (named %v), want more than its 32", a, ok)
	}
}

// balancedSSP1 is shard 0 of an ssp:1 job with the balance layer on (base
// 32) and workers a, b, c and d added at clock 0.
func balancedSSP1(t *testing.T) (*fsmHarness, []clock.WorkerID) {
	t.Helper()
	spec := testSpec(4, "ssp:1")
	spec.Shard, spec.BalanceBase = 0, 32
	h := newFSMHarness(t, spec, make([]float32, 4))
	ids := []clock.WorkerID{"a", "b", "c", "d"}
	for _, w := range ids {
		if a := h.apply(encodeWorker(entryAddWorker, w, 0)); a.Err != nil {
			t.Fatal(a.Err)
		}
	}
	return h, ids
}

// TestAutoRoundIsReplicatedState: under --local-steps auto with --balance
// (Spec.BalanceStep) the round's size follows the rounds the workers'
// pushes ask for, as replicated state: a replica restored from a
// snapshot names the same shares and has the same hash, the shares of a
// round always sum to its global batch, and the data order is tiled
// without gap or overlap across every change of size.
func TestAutoRoundIsReplicatedState(t *testing.T) {
	spec := testSpec(4, "ssp:1")
	spec.Shard, spec.BalanceBase, spec.BalanceStep = 0, 8*32, 8
	h := newFSMHarness(t, spec, make([]float32, 4))
	ids := []clock.WorkerID{"a", "b"}
	for _, w := range ids {
		if a := h.apply(encodeWorker(entryAddWorker, w, 0)); a.Err != nil {
			t.Fatal(a.Err)
		}
	}
	// a's link asks for rounds of 200 samples until iteration 20, then 20.
	want := func(it int64) int64 {
		if it < 20 {
			return 200
		}
		return 20
	}
	batch := map[clock.WorkerID]int64{"a": 16, "b": 16}
	var restored *FSM
	var next, globals []int64 // data position expected next; the global batch each iteration
	for it := int64(0); it < 40; it++ {
		var ps []Push
		for i, w := range ids {
			m := meta(w, it, batch[w])
			m.ComputeNs = int64(1000*(i+1)) * batch[w]
			if w == "a" {
				m.Want = want(it)
			}
			ps = append(ps, Push{PushMeta: m, Grad: gradBytes(make([]float32, 4))})
		}
		h.apply(encodePushes(ps))
		if restored != nil {
			restored.Apply(&raft.Log{Index: h.index, Type: raft.LogCommand, Data: mustEncode(t, ps)})
		}
		var sum, global int64
		for _, w := range ids {
			a := assignmentOf(t, h.f, restored, w, it)
			if w == "a" {
				if next != nil && a.Pos != next[0] {
					t.Fatalf("iteration %d starts at %d, the previous ended at %d", it+1, a.Pos, next[0])
				}
				next = []int64{a.Pos + a.Global}
			}
			batch[w], global = a.Batch, a.Global
			sum += a.Batch
		}
		if sum != global {
			t.Fatalf("iteration %d: shares sum to %d, global %d", it+1, sum, global)
		}
		globals = append(globals, global)
		if it == 10 {
			restored = NewFSM(0, nil)
			if err := restored.Restore(nopCloser{bytes.NewReader(snapshotBytes(t, h.f))}); err != nil {
				t.Fatal(err)
			}
			if restored.StateHash() != h.f.StateHash() {
				t.Fatal("restored state hash differs")
			}
		}
	}
	// 2 steps × 8 × 2 workers to start; 200 asks for ⌈200 ÷ 16⌉ = 13 → 16
	// steps (256); 20 for 2 steps (32) again.
	if globals[0] != 32 || globals[10] != 256 || globals[39] != 32 {
		t.Fatalf("global batches %v: want 32 first, 256 at iteration 11, 32 at the end", globals)
	}
	if restored.StateHash() != h.f.StateHash() {
		t.Fatal("restored replica diverged")
	}
}

// assignmentOf is w's assignment for iteration it+1 on f, which must name
// its position, and the same on restored (a replica restored from a
// snapshot of f) when it is not nil.
func assignmentOf(t *testing.T, f, restored *FSM, w clock.WorkerID, it int64) *shardapi.Assignment {
	t.Helper()
	a, _ := f.assignments(w, it)
	if a == nil || a.Pos < 0 {
		t.Fatalf("iteration %d: %s has no assignment: %+v", it+1, w, a)
	}
	if restored != nil {
		if b, _ := restored.assignments(w, it); b == nil || *b != *a {
			t.Fatalf("iteration %d: restored replica assigns %+v, the original %+v", it+1, b, a)
		}
	}
	return a
}

// TestHostileWantIsBounded: a mesh-key holder's worker that asks for the
// largest round the wire accepts (PushMeta.Want = MaxPushSamples) under
// --local-steps auto:12 with --balance grows every worker's round to 8
// steps, the largest power of two within the job's bound, never past it
// (a round of 16 steps would also leave a snapshot no replica restores);
// a want outside [0, MaxPushSamples] is refused naming the value, one
// from a non-member or a revoked node is not recorded, and once the
// hostile workers are removed or revoked their asks stop counting: the
// round shrinks to what the others ask.
func TestHostileWantIsBounded(t *testing.T) {
	const step, bound = 8, 12
	spec := testSpec(4, "ssp:1")
	spec.Shard, spec.BalanceBase, spec.BalanceStep = 0, step*bound, step
	h := newFSMHarness(t, spec, make([]float32, 4))
	members := []clock.WorkerID{"a", "b", "m", "n"} // m and n hostile
	for _, w := range members {
		if a := h.apply(encodeWorker(entryAddWorker, w, 0)); a.Err != nil {
			t.Fatal(a.Err)
		}
	}
	hostile := spec.MaxPushSamples()
	batch := map[clock.WorkerID]int64{}
	// round has every member push iteration it, the honest ones asking
	// for rounds of 20 samples, m and n for hostile; it returns the global
	// batch of iteration it+1, checked on a replica restored from a
	// snapshot taken after the entry.
	round := func(it int64) int64 {
		t.Helper()
		var ps []Push
		for _, w := range members {
			m := meta(w, it, max(batch[w], 16))
			m.ComputeNs, m.Want = 1000*m.Samples, 20
			if w == "m" || w == "n" {
				m.Want = hostile
			}
			ps = append(ps, Push{PushMeta: m, Grad: gradBytes(make([]float32, 4))})
		}
		for _, r := range h.apply(encodePushes(ps)).Pushes {
			if r.Err != nil {
				t.Fatalf("iteration %d: %v", it, r.Err)
			}
		}
		restored := NewFSM(0, nil)
		if err := restored.Restore(nopCloser{bytes.NewReader(snapshotBytes(t, h.f))}); err != nil {
			t.Fatalf("iteration %d: a snapshot at a round of %d steps: %v", it, h.f.st.bal.h, err)
		}
		var sum, global int64
		for _, w := range members {
			a := assignmentOf(t, h.f, restored, w, it)
			batch[w], global = a.Batch, a.Global
			sum += a.Batch
		}
		if sum != global {
			t.Fatalf("iteration %d: shares sum to %d, global %d", it+1, sum, global)
		}
		if s := h.f.st.bal.h; s < minAutoSteps || s > bound || s&(s-1) != 0 {
			t.Fatalf("iteration %d: a round of %d steps, not a power of two in [2, %d]", it+1, s, bound)
		}
		return global
	}
	// Out of range: refused, naming the value, nothing recorded.
	for _, c := range []struct {
		want   int64
		reason shardapi.Reason
	}{{-1, shardapi.ReasonBadRequest}, {hostile + 1, shardapi.ReasonOutOfBounds}, {math.MaxInt64, shardapi.ReasonOutOfBounds}} {
		m := meta("m", 0, 16)
		m.Want = c.want
		r := h.apply(encodePushes([]Push{{PushMeta: m, Grad: gradBytes(make([]float32, 4))}})).Pushes[0]
		var rej *shardapi.RejectError
		if !errors.As(r.Err, &rej) || rej.Reason != c.reason || !strings.Contains(rej.Detail, fmt.Sprint(c.want)) {
			t.Fatalf("want %d: %v, want a %s refusal naming %d", c.want, r.Err, c.reason, c.want)
		}
	}
	// A non-member's ask: refused by the gate, not recorded.
	m := meta("zz", 0, 16)
	m.Want = hostile
	if r := h.apply(encodePushes([]Push{{PushMeta: m, Grad: gradBytes(make([]float32, 4))}})).Pushes[0]; r.Err == nil {
		t.Fatal("a non-member's push applied")
	}
	if len(h.f.st.bal.wants) != 0 {
		t.Fatalf("refused asks recorded: %+v", h.f.st.bal.wants)
	}
	// The largest ask the wire takes: 8 steps a worker, 8 × 8 × 4 samples
	// (the global round counts the most workers present, 4).
	most := len(members)
	var global int64
	for it := int64(0); it < 4; it++ {
		global = round(it)
	}
	if want := int64(step * 8 * most); global != want || h.f.st.bal.h != 8 {
		t.Fatalf("under the hostile ask: global %d at %d steps, want %d at 8 (auto:%d)", global, h.f.st.bal.h, want, bound)
	}
	// n removed: m's ask still holds the round at 8 steps.
	if a := h.apply(encodeWorker(entryRemoveWorker, "n", 0)); a.Err != nil {
		t.Fatal(a.Err)
	}
	members = slices.DeleteFunc(members, func(w clock.WorkerID) bool { return w == "n" })
	for it := int64(4); it < 6; it++ {
		global = round(it)
	}
	if want := int64(step * 8 * most); global != want || h.f.st.bal.h != 8 {
		t.Fatalf("after n left: global %d at %d steps, want %d at 8 (m still asks)", global, h.f.st.bal.h, want)
	}
	// m revoked: its ask is dropped with it, a push of it refused and not
	// recorded, and the round shrinks to the honest asks' 2 steps.
	if a := h.apply(encodeIdentity(identityHeader{Op: "revoke", ID: "m"})); a.Err != nil {
		t.Fatal(a.Err)
	}
	members = slices.DeleteFunc(members, func(w clock.WorkerID) bool { return w == "m" })
	m = meta("m", 6, 16)
	m.Want = hostile
	if r := h.apply(encodePushes([]Push{{PushMeta: m, Grad: gradBytes(make([]float32, 4))}})).Pushes[0]; r.Err == nil {
		t.Fatal("a revoked node's push applied")
	}
	for _, w := range h.f.st.bal.wants {
		if w.Worker == "m" || w.Worker == "n" {
			t.Fatalf("a departed worker's ask kept: %+v", h.f.st.bal.wants)
		}
	}
	for it := int64(6); it < 9; it++ {
		global = round(it)
	}
	if want := int64(step * 2 * most); global != want || h.f.st.bal.h != 2 {
		t.Fatalf("after the hostile workers left: global %d at %d steps, want %d at 2", global, h.f.st.bal.h, want)
	}
}
