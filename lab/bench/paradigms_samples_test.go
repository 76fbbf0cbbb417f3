package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"

	"dsspmesh/cudaops"
)

// The statistics of the paradigms without the mesh: how many training
// samples each needs to reach a test accuracy, with the shard's arithmetic
// (one momentum step per Raft entry, gradients weighted samples/b0, the
// job's step-decay schedule on applied samples) and each paradigm's read
// pattern, but no processes, no network and no wall clock. Time is
// simulated only to order ASP's pushes; every other paradigm is a sequence
// of rounds. Deterministic for a seed.
//
//	DSSP_SAMPLES=1 go test ./lab/bench -run TestSamplesToTarget -v -timeout 30m
//
// DSSP_SAMPLES_VARIANTS (comma-separated names below), DSSP_SAMPLES_SEEDS
// (count, default 5) and DSSP_SAMPLES_TARGET (default 0.95) narrow it. It
// runs only when DSSP_SAMPLES is set: minutes of CPU, heavy work.

// statVariant is one paradigm's read pattern.
type statVariant struct {
	name string
	// asp: every push its own entry, read right after it (simulated time
	// orders the pushes). Otherwise rounds: every worker's gradient of
	// round r, applied as entries of the round.
	asp bool
	// delay: rounds the read lags behind the last complete round. 0: the
	// gradient of round r is computed on θ after round r−1 (bsp); 1: after
	// round r−2 (the pipelined gate, ssp:1+pipeline).
	delay int
	// ssp1: the read of each worker is θ right after its own push of the
	// previous round, the pushes of a round applied one entry each in a
	// random order (plain ssp:1 with every worker in step).
	ssp1 bool
	// balance: one job-wide order tiled by the round's batches (the balance
	// layer), else each worker its own shuffled loader of the job's batch.
	balance bool
	// slow: per-worker slowdowns (nil: homogeneous); balance sizes batches
	// ∝ 1/slowdown with Σ = n·b0; ASP's compute times scale with it.
	slow []float64
	// entries: how many Raft entries a round's pushes make (bsp and
	// balance rounds; 1 = one momentum step per round).
	entries int
	// lr, momentum override the job's (0: the job's; momentum < 0: none).
	lr, momentum float64
	// extrap: under delay 1, the gradient is computed on θ_{r−2} +
	// extrap·(θ_{r−2} − θ_{r−3}): the last round's step, scaled, stands in
	// for the one in flight.
	extrap float64
	// bf16: every read of θ is rounded to bfloat16, as parameter slices
	// travel in bf16 under the job's default --wire-precision int8 (and
	// under bf16).
	bf16 bool
	// ahead: under delay 1, this fraction of each worker's batch is
	// computed on the delayed read and the rest on θ after round r−1, the
	// two parts weighted by their samples (a worker that starts its batch
	// while its push is in flight and finishes it on the fresh θ: the job's
	// --pipeline-fresh is 1 − ahead).
	ahead float64
}

// roundBF16 rounds x to bfloat16, to nearest even (shardapi's wire).
func roundBF16(x float32) float32 {
	b := math.Float32bits(x)
	b += 0x7fff + (b>>16)&1
	return math.Float32frombits(b &^ 0xffff)
}

const (
	statB0       = 64
	statWorkers  = 4
	statLR       = 0.05 // node.DefaultJobSpec
	statMomentum = 0.5
	statDecay    = 0.85
	statDecayN   = 60000
)

func statVariants() []statVariant {
	het := []float64{1, 1, 2, 4}
	return []statVariant{
		{name: "bsp", entries: 1},
		{name: "bsp/4entries", entries: statWorkers},
		{name: "asp", asp: true},
		{name: "asp/het", asp: true, slow: het},
		{name: "ssp1+balance", ssp1: true, balance: true},
		{name: "ssp1+balance/het", ssp1: true, balance: true, slow: het},
		{name: "sync+balance/het", balance: true, slow: het, entries: 1},
		{name: "pipe+balance", delay: 1, balance: true, entries: 1},
		{name: "pipe+balance/het", delay: 1, balance: true, slow: het, entries: 1},
		{name: "pipe+balance/mom0", delay: 1, balance: true, entries: 1, momentum: -1},
		{name: "pipe+balance/mom0.25", delay: 1, balance: true, entries: 1, momentum: 0.25},
		{name: "pipe+balance/lr0.035", delay: 1, balance: true, entries: 1, lr: 0.035},
		{name: "bsp/mom0", entries: 1, momentum: -1},
		{name: "pipe+balance/extrap0.5", delay: 1, balance: true, entries: 1, extrap: 0.5},
		{name: "pipe+balance/extrap1", delay: 1, balance: true, entries: 1, extrap: 1},
		{name: "pipe+balance/4entries", delay: 1, balance: true, entries: statWorkers},
		{name: "pipe+balance/bf16", delay: 1, balance: true, entries: 1, bf16: true},
		{name: "pipe+balance/bf16/extrap0.5", delay: 1, balance: true, entries: 1, extrap: 0.5, bf16: true},
		{name: "pipe+balance/4entries/extrap0.5", delay: 1, balance: true, entries: statWorkers, extrap: 0.5},
		{name: "pipe+balance/het/ahead0.25", delay: 1, balance: true, slow: het, entries: 1, ahead: 0.25},
		{name: "pipe+balance/het/ahead0.5", delay: 1, balance: true, slow: het, entries: 1, ahead: 0.5},
		{name: "pipe+balance/het/ahead0.75", delay: 1, balance: true, slow: het, entries: 1, ahead: 0.75},
		{name: "pipe+balance/het/ahead0.875", delay: 1, balance: true, slow: het, entries: 1, ahead: 0.875},
	}
}

func (v statVariant) mu() float64 {
	switch {
	case v.momentum < 0:
		return 0
	case v.momentum > 0:
		return v.momentum
	}
	return statMomentum
}

func (v statVariant) rate(samples int64) float64 {
	lr := statLR
	if v.lr > 0 {
		lr = v.lr
	}
	return lr * math.Pow(statDecay, float64(samples/statDecayN))
}

// batches is each worker's batch: ∝ 1/slowdown under balance, Σ = n·b0,
// the remainder to the fastest.
func (v statVariant) batches() []int {
	b := make([]int, statWorkers)
	if !v.balance || v.slow == nil {
		for i := range b {
			b[i] = statB0
		}
		return b
	}
	var inv float64
	for _, s := range v.slow {
		inv += 1 / s
	}
	left := statWorkers * statB0
	for i, s := range v.slow {
		b[i] = int(math.Floor(float64(statWorkers*statB0) / s / inv))
		left -= b[i]
	}
	for i := 0; left > 0; i = (i + 1) % statWorkers {
		b[i]++
		left--
	}
	return b
}

// statRun is one seeded run of one variant.
type statRun struct {
	v      statVariant
	seed   uint64
	model  *cudaops.Model
	train  cudaops.Dataset
	test   *cudaops.Memory
	quick  *cudaops.Memory
	target float64

	theta, velocity, sum []float32
	samples              int64
	steps                int
}

// step is shard/optimizer.go's momentum step with the entry's weighted sum.
func (r *statRun) step() {
	lr := float32(r.v.rate(r.samples))
	mu := float32(r.v.mu())
	for i, g := range r.sum {
		v := float32(mu*r.velocity[i]) + g
		r.velocity[i] = v
		r.theta[i] -= float32(lr * v)
	}
	clear(r.sum)
	r.steps++
}

// add adds gradient g of b samples, weighted b/b0 as FSM.weigh does, to
// the entry's sum.
func (r *statRun) add(g []float32, b int) {
	w := float32(float64(b) / statB0)
	for i, x := range g {
		r.sum[i] += w * x
	}
}

// reached evaluates at the current sample count; quick subset first.
func (r *statRun) reached() (bool, float64, error) {
	q, err := r.model.Evaluate(r.theta, r.quick)
	if err != nil {
		return false, 0, err
	}
	if q.Accuracy < r.target-0.015 {
		return false, q.Accuracy, nil
	}
	e, err := r.model.Evaluate(r.theta, r.test)
	if err != nil {
		return false, 0, err
	}
	return e.Accuracy >= r.target, e.Accuracy, nil
}

const (
	statEvalEvery = 1280   // samples between evaluations (5 rounds of 256)
	statMaxSample = 400000 // give up
)

// samplesTo returns the applied samples at the first evaluation at or
// above the target (statMaxSample+ if never).
func (r *statRun) samplesTo() (int64, error) {
	n := r.model.NumParams()
	r.theta = r.model.Init(r.seed)
	r.velocity = make([]float32, n)
	r.sum = make([]float32, n)
	if r.v.asp {
		return r.runASP()
	}
	return r.runRounds()
}

// loaders are the per-worker loaders of the unbalanced paradigms (the
// node's: the job's seed xor a hash of the worker).
func (r *statRun) loaders() ([]*cudaops.Loader, error) {
	ls := make([]*cudaops.Loader, statWorkers)
	for i := range ls {
		l, err := cudaops.NewLoader(r.train, cudaops.LoaderConfig{Worker: 0, Workers: 1, BatchSize: statB0, Seed: r.seed ^ (0x9e3779b97f4a7c15 * uint64(i+1))})
		if err != nil {
			return nil, err
		}
		ls[i] = l
	}
	return ls, nil
}

func (r *statRun) runRounds() (int64, error) {
	v := r.v
	n := r.model.NumParams()
	in := r.model.InputSize()
	bs := v.batches()
	global := 0
	for _, b := range bs {
		global += b
	}
	ls, err := r.loaders()
	if err != nil {
		return 0, err
	}
	order, err := cudaops.NewOrder(r.train.Len(), r.seed)
	if err != nil {
		return 0, err
	}
	rng := rand.New(rand.NewPCG(r.seed, 77))
	x := make([]float32, global*in)
	labels := make([]int, global)
	grads := make([][]float32, statWorkers)
	reads := make([][]float32, statWorkers) // ssp1: each worker's θ
	for i := range grads {
		grads[i] = make([]float32, n)
		reads[i] = append([]float32(nil), r.theta...)
	}
	// hist[k] is θ after round r−1−k (hist[0] = the latest).
	hist := [][]float32{append([]float32(nil), r.theta...)}
	depth := v.delay
	if v.extrap != 0 {
		depth++
	}
	ext := make([]float32, n)
	split := make([]float32, n)
	var pos int64
	next := int64(statEvalEvery)
	for round := 0; ; round++ {
		readAt := hist[min(v.delay, len(hist)-1)]
		if v.extrap != 0 && len(hist) > v.delay+1 {
			prev := hist[v.delay+1]
			for i := range ext {
				ext[i] = readAt[i] + float32(float32(v.extrap)*(readAt[i]-prev[i]))
			}
			readAt = ext
		}
		for i, b := range bs {
			xb, lb := x[:b*in], labels[:b]
			if v.balance {
				order.Fill(r.train, pos, xb, lb)
				pos += int64(b)
			} else {
				ls[i].Next(xb, lb)
			}
			at := readAt
			if v.ssp1 {
				at = reads[i]
			}
			if k := int(v.ahead * float64(b)); k > 0 && k < b {
				if err := r.splitGradient(at, hist[0], xb, lb, k, grads[i], split); err != nil {
					return 0, err
				}
				continue
			}
			if _, err := r.model.Gradient(at, xb, lb, grads[i]); err != nil {
				return 0, err
			}
		}
		switch {
		case v.ssp1:
			// One entry per push, in a random order; each worker reads θ
			// right after its own push.
			for _, i := range rng.Perm(statWorkers) {
				r.add(grads[i], bs[i])
				r.step()
				r.samples += int64(bs[i])
				copy(reads[i], r.theta)
			}
		default:
			per := (statWorkers + v.entries - 1) / v.entries
			for lo := 0; lo < statWorkers; lo += per {
				var s int64
				for i := lo; i < min(lo+per, statWorkers); i++ {
					r.add(grads[i], bs[i])
					s += int64(bs[i])
				}
				r.step()
				r.samples += s
			}
		}
		if v.delay > 0 {
			h := hist[len(hist)-1]
			if len(hist) <= depth {
				h = make([]float32, n)
				hist = append(hist, nil)
			}
			copy(hist[1:], hist[:len(hist)-1])
			copy(h, r.theta)
			if v.bf16 {
				for i := range h {
					h[i] = roundBF16(h[i])
				}
			}
			hist[0] = h
		} else {
			copy(hist[0], r.theta)
		}
		if r.samples >= next {
			next += statEvalEvery
			ok, _, err := r.reached()
			if err != nil {
				return 0, err
			}
			if ok {
				return r.samples, nil
			}
			if r.samples > statMaxSample {
				return r.samples, nil
			}
		}
	}
}

// splitGradient is the mean gradient of the b = len(lb) samples of xb,
// the first k taken at stale and the rest at fresh, into g.
func (r *statRun) splitGradient(stale, fresh, xb []float32, lb []int, k int, g, tmp []float32) error {
	in := r.model.InputSize()
	b := len(lb)
	if _, err := r.model.Gradient(stale, xb[:k*in], lb[:k], g); err != nil {
		return err
	}
	if _, err := r.model.Gradient(fresh, xb[k*in:], lb[k:], tmp); err != nil {
		return err
	}
	a, c := float32(float64(k)/float64(b)), float32(float64(b-k)/float64(b))
	for j := range g {
		g[j] = a*g[j] + c*tmp[j]
	}
	return nil
}

// runASP orders pushes by simulated finish time: worker i computes for
// slow_i·(1 ± 10%) of a base batch, its push is applied as one entry, and
// it reads θ right after it (the mesh's round trip is the same for all, so
// it only shifts every worker alike and is left out).
func (r *statRun) runASP() (int64, error) {
	v := r.v
	n := r.model.NumParams()
	in := r.model.InputSize()
	ls, err := r.loaders()
	if err != nil {
		return 0, err
	}
	rng := rand.New(rand.NewPCG(r.seed, 78))
	slow := v.slow
	if slow == nil {
		slow = []float64{1, 1, 1, 1}
	}
	draw := func(i int) float64 { return slow[i] * (0.9 + 0.2*rng.Float64()) }
	finish := make([]float64, statWorkers)
	reads := make([][]float32, statWorkers)
	x := make([]float32, statB0*in)
	labels := make([]int, statB0)
	g := make([]float32, n)
	for i := range finish {
		finish[i] = draw(i)
		reads[i] = append([]float32(nil), r.theta...)
	}
	next := int64(statEvalEvery)
	for {
		i := 0
		for j := range finish {
			if finish[j] < finish[i] {
				i = j
			}
		}
		ls[i].Next(x, labels)
		if _, err := r.model.Gradient(reads[i], x, labels, g); err != nil {
			return 0, err
		}
		r.add(g, statB0)
		r.step()
		r.samples += statB0
		copy(reads[i], r.theta)
		finish[i] += draw(i)
		if r.samples >= next {
			next += statEvalEvery
			ok, _, err := r.reached()
			if err != nil {
				return 0, err
			}
			if ok || r.samples > statMaxSample {
				return r.samples, nil
			}
		}
	}
}

func TestSamplesToTarget(t *testing.T) {
	if os.Getenv("DSSP_SAMPLES") == "" {
		t.Skip("an experiment of minutes of CPU: set DSSP_SAMPLES=1 (see the comment above TestSamplesToTarget)")
	}
	seeds := 5
	if s := os.Getenv("DSSP_SAMPLES_SEEDS"); s != "" {
		var err error
		if seeds, err = strconv.Atoi(s); err != nil {
			t.Fatal(err)
		}
	}
	target := 0.95
	if s := os.Getenv("DSSP_SAMPLES_TARGET"); s != "" {
		var err error
		if target, err = strconv.ParseFloat(s, 64); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]bool{}
	for _, s := range strings.Split(os.Getenv("DSSP_SAMPLES_VARIANTS"), ",") {
		if s != "" {
			want[s] = true
		}
	}
	train, test, err := cudaops.LoadDataset("mnist", "")
	if err != nil {
		t.Skip(err)
	}
	model, err := cudaops.NewModel("mlp", cudaops.ModelOptions{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("variant,seed,samples,rounds_of_256\n")
	for _, v := range statVariants() {
		if len(want) > 0 && !want[v.name] {
			continue
		}
		var got []float64
		for s := 1; s <= seeds; s++ {
			r := &statRun{v: v, seed: uint64(s), model: model, train: train, test: test, quick: test.Subset(2000), target: target}
			n, err := r.samplesTo()
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, float64(n))
			fmt.Printf("%s,%d,%d,%.0f\n", v.name, s, n, float64(n)/(statWorkers*statB0))
		}
		sort.Float64s(got)
		var mean float64
		for _, g := range got {
			mean += g
		}
		mean /= float64(len(got))
		fmt.Printf("# %s: median %.0f mean %.0f samples (min %.0f max %.0f) = median %.0f rounds of 256\n",
			v.name, got[len(got)/2], mean, got[0], got[len(got)-1], got[len(got)/2]/(statWorkers*statB0))
	}
}
