package balance

import (
	"fmt"
	"math"
	"slices"
)

// Config is a Balancer's fixed parameters.
type Config struct {
	// Base is the batch of one worker before balancing (the job's batch).
	// The global batch is Base × the most workers present at once: it
	// grows when a worker joins and stays when one leaves, whose share the
	// others take.
	Base int64
	// Min and Max bound every worker's batch (Max 0: the global batch).
	Min, Max int64
	// Window is how many observations per worker the model is fitted on;
	// MinObs how many a worker needs before its model counts.
	Window, MinObs int
	// Interval is the least number of rounds between two re-allocations
	// (the observations of the last batch must reach the model first),
	// except for a rapid one, which needs only a round.
	Interval int64
	// DeadBand: no re-allocation unless it would shorten the slowest
	// predicted finish by more than this fraction.
	DeadBand float64
	// NoiseBand: and none below Rapid unless it would shorten it by more
	// than NoiseBand × the largest Model.Noise of the fits it compares: a
	// gain inside the fits' own noise is no gain (on a shared CPU the
	// compute times move with the load, and chasing them moves the
	// largest batch, which sets a gated round). 0: off.
	NoiseBand float64
	// Step is η, the fraction of the way to the optimum one re-allocation
	// moves; it halves (down to MinStep) whenever a worker's batch would
	// move against its previous move, and returns to Step after a rapid one.
	Step, MinStep float64
	// Rapid: an imbalance above this fraction (a worker slowed down,
	// joined, left) moves all the way to the optimum at once.
	Rapid float64
}

// DefaultConfig is the configuration for a job whose per-worker batch is
// base: b_min = max(1, base/8), no memory cap, a window of 16 observations
// (2 to start), re-allocation at most every 4 rounds, a 5% dead band and
// a noise band of 2.75 standard errors of the fits, steps of ½ halving to ⅛,
// full steps above a 30% imbalance.
func DefaultConfig(base int64) Config {
	return Config{Base: base, Min: max(1, base/8), Window: 16, MinObs: 2, Interval: 4,
		DeadBand: 0.05, NoiseBand: 2.75, Step: 0.5, MinStep: 0.125, Rapid: 0.3}
}

// Validate names the bad value.
func (c Config) Validate() error {
	switch {
	case c.Base < 1:
		return fmt.Errorf("balance: base batch %d must be at least 1", c.Base)
	case c.Min < 0 || c.Min > c.Base:
		return fmt.Errorf("balance: minimum batch %d outside [0, base %d]", c.Min, c.Base)
	case c.Max != 0 && c.Max < c.Base:
		return fmt.Errorf("balance: maximum batch %d below the base %d", c.Max, c.Base)
	case c.Window < 1 || c.Window > 1024 || c.MinObs < 1 || c.MinObs > c.Window:
		return fmt.Errorf("balance: window %d and minimum observations %d: want 1 ≤ min ≤ window ≤ 1024", c.Window, c.MinObs)
	case c.Interval < 1:
		return fmt.Errorf("balance: interval %d must be at least 1 round", c.Interval)
	case !(c.NoiseBand >= 0) || c.NoiseBand > 100:
		return fmt.Errorf("balance: noise band %g: want 0 ≤ noise band ≤ 100", c.NoiseBand)
	case !(c.DeadBand >= 0) || !(c.Rapid > c.DeadBand):
		return fmt.Errorf("balance: dead band %g and rapid threshold %g: want 0 ≤ dead band < rapid", c.DeadBand, c.Rapid)
	case !(c.MinStep > 0) || !(c.Step >= c.MinStep) || c.Step > 1:
		return fmt.Errorf("balance: step %g and minimum step %g: want 0 < min ≤ step ≤ 1", c.Step, c.MinStep)
	}
	return nil
}

// worker is one worker's state: its window, batch and last move.
type worker struct {
	id    string
	win   Window
	batch int64
	move  int8 // sign of the last change of batch
}

// Balancer holds the allocation of a global batch over a changing set of
// workers. See the package doc for the contract.
type Balancer struct {
	cfg     Config
	workers []*worker // sorted by id
	global  int64
	version uint64 // bumped by every change of allocation
	changed int64  // round of the last change
	eta     float64
	moves   uint64 // re-allocations by Decide
	reverse uint64 // of which halved η
	// blind: the allocation was made while some worker had no model of
	// its own (a joiner's prior, or no fit at all). Decide moves to the
	// modelled optimum as soon as every worker has one, whatever the gain.
	blind bool
}

// New returns a Balancer with no workers.
func New(cfg Config) (*Balancer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Balancer{cfg: cfg, eta: cfg.Step}, nil
}

// Config returns the configuration.
func (b *Balancer) Config() Config { return b.cfg }

func (b *Balancer) find(id string) (int, bool) {
	return slices.BinarySearchFunc(b.workers, id, func(w *worker, id string) int {
		switch {
		case w.id < id:
			return -1
		case w.id > id:
			return 1
		}
		return 0
	})
}

// Join adds worker id at round and re-allocates at once (a new worker is
// predicted at the median of the known models until its own fills in).
// It returns false, changing nothing, if id is present.
func (b *Balancer) Join(id string, round int64) bool {
	i, ok := b.find(id)
	if ok {
		return false
	}
	b.workers = slices.Insert(b.workers, i, &worker{id: id, win: Window{Cap: b.cfg.Window}})
	b.global = max(b.global, b.cfg.Base*int64(len(b.workers)))
	b.reallocate(round)
	return true
}

// Leave removes worker id at round and gives its share to the others. It
// returns false if id is absent.
func (b *Balancer) Leave(id string, round int64) bool {
	i, ok := b.find(id)
	if !ok {
		return false
	}
	b.workers = slices.Delete(b.workers, i, i+1)
	b.reallocate(round)
	return true
}

// Rescale gives the Balancer cfg (a new Base, with Min and Max to match:
// under --local-steps auto the job's round grows and shrinks with the
// link, docs/design.md "H from the link") and re-sizes the global batch
// to cfg.Base × the most workers present at once, re-allocating at round
// as a join does: straight to the optimum under the current models,
// which predict any batch size. It returns an error, changing nothing,
// for a bad cfg.
func (b *Balancer) Rescale(cfg Config, round int64) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	most := b.global / b.cfg.Base
	b.cfg = cfg
	b.global = cfg.Base * most
	b.reallocate(round)
	return nil
}

// Global returns the global batch.
func (b *Balancer) Global() int64 { return b.global }

// reallocate moves straight to the optimum under the current models,
// priors for the workers without one; on a failure (bounds that cannot
// hold the global batch) it splits equally, clamped.
func (b *Balancer) reallocate(round int64) {
	b.version++
	b.changed, b.eta = round, b.cfg.Step
	if len(b.workers) == 0 {
		b.blind = false
		return
	}
	b.blind = b.models(false) == nil
	models := b.models(true)
	next, err := Allocate(models, b.global, b.bounds())
	if err != nil {
		next = equalSplit(b.global, len(b.workers))
	}
	for i, w := range b.workers {
		w.batch, w.move = next[i], 0
	}
}

func equalSplit(total int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = total / int64(n)
		if int64(i) < total%int64(n) {
			out[i]++
		}
	}
	return out
}

func (b *Balancer) bounds() []Bounds {
	out := make([]Bounds, len(b.workers))
	for i := range out {
		out[i] = Bounds{Min: b.cfg.Min, Max: b.cfg.Max}
	}
	return out
}

// models fits every worker's model; a worker with too few observations
// gets the median of the fitted ones when prior, else the result is nil.
// With no fitted model at all every worker is predicted alike.
func (b *Balancer) models(prior bool) []Model {
	out := make([]Model, len(b.workers))
	known := make([]bool, len(b.workers))
	var as, ps []float64
	for i, w := range b.workers {
		if m, ok := w.win.Fit(b.cfg.MinObs); ok {
			out[i], known[i] = m, true
			as, ps = append(as, m.A), append(ps, m.P)
			continue
		}
		if !prior {
			return nil
		}
	}
	p := Model{P: 1}
	if len(ps) > 0 {
		p = Model{A: median(as), P: median(ps)}
	}
	for i := range out {
		if !known[i] {
			out[i] = p
		}
	}
	return out
}

// Observe records that worker id computed a batch of samples in computeNs.
// Unknown workers and empty observations are ignored (false).
func (b *Balancer) Observe(id string, samples, computeNs int64) bool {
	i, ok := b.find(id)
	if !ok {
		return false
	}
	return b.workers[i].win.Add(Obs{Samples: samples, ComputeNs: computeNs})
}

// Decide is called once per round (in the gate's terms, when t_min reaches
// round) and re-allocates if the damping allows; it reports whether the
// allocation changed. An allocation made blind (a worker without a model
// of its own) is replaced by the modelled optimum at the first Decide at
// which every worker has one, even when the batches stay: its predictions
// are then new (a worker under local rounds takes short probe rounds until
// its assignment carries one, node/worker).
func (b *Balancer) Decide(round int64) bool {
	if len(b.workers) < 2 || round <= b.changed {
		return false
	}
	models := b.models(false)
	if models == nil {
		return false
	}
	target, err := Allocate(models, b.global, b.bounds())
	if err != nil {
		return false
	}
	if b.blind {
		b.blind = false
		b.eta = b.cfg.Step
		b.set(target, round)
		return true
	}
	cur := make([]int64, len(b.workers))
	for i, w := range b.workers {
		cur[i] = w.batch
	}
	best := MaxTime(models, target)
	gain := MaxTime(models, cur)/best - 1
	// A small imbalance waits Interval rounds, for the last batches to
	// reach the windows; a large one (a worker slowed, a joiner's first
	// measurements, the first allocation) is corrected at the next round.
	// Below Rapid, a gain inside the fits' noise is none.
	var noise float64
	for _, m := range models {
		noise = math.Max(noise, m.Noise)
	}
	if !(gain > b.cfg.DeadBand) || (gain <= b.cfg.Rapid && (round-b.changed < b.cfg.Interval || !(gain > b.cfg.NoiseBand*noise))) {
		return false
	}
	next := target
	if gain > b.cfg.Rapid {
		b.eta = b.cfg.Step
	} else {
		for i, w := range b.workers {
			if d := sign(target[i] - cur[i]); d != 0 && w.move != 0 && d != w.move {
				b.eta = math.Max(b.eta/2, b.cfg.MinStep)
				b.reverse++
				break
			}
		}
		next = partial(cur, target, b.eta)
		if slices.Equal(next, cur) {
			next = target
		}
	}
	b.set(next, round)
	return true
}

// set makes next the allocation, decided at round.
func (b *Balancer) set(next []int64, round int64) {
	for i, w := range b.workers {
		if d := sign(next[i] - w.batch); d != 0 {
			w.move = d
		}
		w.batch = next[i]
	}
	b.version++
	b.moves++
	b.changed = round
}

func sign(x int64) int8 {
	switch {
	case x > 0:
		return 1
	case x < 0:
		return -1
	}
	return 0
}

// partial is cur + η(target − cur) rounded to integers with the same sum:
// floors, then one more to the largest fractional parts (ties to the lower
// index). Every value lies between cur and target, so within their bounds.
func partial(cur, target []int64, eta float64) []int64 {
	n := len(cur)
	out := make([]int64, n)
	frac := make([]float64, n)
	var want, got int64
	for i := range n {
		want += target[i]
		x := float64(cur[i]) + float64(eta*float64(target[i]-cur[i]))
		f := math.Floor(x)
		out[i], frac[i] = int64(f), x-f
		got += out[i]
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int {
		switch {
		case frac[i] > frac[j]:
			return -1
		case frac[i] < frac[j]:
			return 1
		}
		return 0
	})
	for k := 0; got < want && k < n; k++ {
		out[order[k]]++
		got++
	}
	return out
}

// Assignment is one worker's share of the global batch: Batch samples
// starting at Offset (the batches of the workers before it in id order),
// so the workers' ranges tile [0, Global) without overlap.
type Assignment struct {
	Worker    string  `json:"worker"`
	Batch     int64   `json:"batch"`
	Offset    int64   `json:"offset"`
	PredictNs float64 `json:"predicted_ns"` // predicted compute time, 0 without a model
}

// Allocation is the current allocation, in worker-id order.
type Allocation struct {
	Version uint64       `json:"version"`
	Round   int64        `json:"round"` // when it was decided
	Global  int64        `json:"global"`
	Workers []Assignment `json:"workers"`
}

// Allocation returns the current allocation.
func (b *Balancer) Allocation() Allocation {
	a := Allocation{Version: b.version, Round: b.changed, Global: b.global, Workers: make([]Assignment, len(b.workers))}
	var off int64
	for i, w := range b.workers {
		a.Workers[i] = Assignment{Worker: w.id, Batch: w.batch, Offset: off}
		if m, ok := w.win.Fit(b.cfg.MinObs); ok {
			a.Workers[i].PredictNs = m.Time(w.batch)
		}
		off += w.batch
	}
	return a
}

// Batch returns worker id's batch and offset.
func (b *Balancer) Batch(id string) (batch, offset int64, ok bool) {
	i, ok := b.find(id)
	if !ok {
		return 0, 0, false
	}
	for _, w := range b.workers[:i] {
		offset += w.batch
	}
	return b.workers[i].batch, offset, true
}

// Stats counts the Balancer's decisions.
type Stats struct {
	Version  uint64  `json:"version"`
	Moves    uint64  `json:"moves"`    // re-allocations by Decide
	Reversed uint64  `json:"reversed"` // of which halved the step
	Step     float64 `json:"step"`     // η now
}

// Stats returns the counters.
func (b *Balancer) Stats() Stats {
	return Stats{Version: b.version, Moves: b.moves, Reversed: b.reverse, Step: b.eta}
}
