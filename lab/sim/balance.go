package sim

import (
	"fmt"
	"time"

	"dsspmesh/balance"
	"dsspmesh/clock"
)

// BalanceConfig turns on the balance layer (package balance) in a run:
// each worker's batch is sized to its measured speed, the global batch
// stays Base × Workers.
type BalanceConfig struct {
	// Base is the batch a worker's Model.Mean is the compute time of; a
	// batch of b takes Overhead + draw·b/Base, draw from the Model.
	Base int64
	// Overhead is the per-step time that does not grow with the batch.
	Overhead time.Duration
	// LocalSteps H > 1 makes each push a round (docs/design.md, "Local
	// rounds"): a worker's share is counted in rounds of Base × H samples
	// (the balancer's base), taken in RoundSteps steps of about Base
	// each, each step paying Overhead; the push's latency (Config.Latency)
	// is paid once a round. 0 and 1 are one step a push.
	LocalSteps int
	// Balancer is the balance layer's configuration (Base is set from above).
	Balancer balance.Config
}

// DefaultBalanceConfig is a base batch of 64 (the mesh's default job) and
// balance.DefaultConfig.
func DefaultBalanceConfig() BalanceConfig {
	return BalanceConfig{Base: 64, Balancer: balance.DefaultConfig(64)}
}

// BalanceResult is a run with the balance layer (or without: Balanced
// false), measured in samples.
type BalanceResult struct {
	Result
	Balanced bool
	// Samples is every applied push's batch summed.
	Samples int64
	// Utilisation is Samples / (SimTime × Σ speeds), a worker's speed being
	// Base / (Model.Mean × Model.Slowdown): the share of the mesh's compute
	// that went into samples.
	Utilisation float64
	// Moves and Reversed count the balancer's re-allocations and halvings.
	Moves, Reversed uint64
	// Batches is the final allocation in worker order.
	Batches []int64
}

// RoundSteps is the local steps of a round of n samples at a base batch
// of base under H local steps: n / base rounded, at least 2 and at most n
// (node/worker's steps); 1 without local rounds.
func RoundSteps(n, base int64, h int) int64 {
	if h <= 1 {
		return 1
	}
	return max(1, min(n, max(2, (n+base/2)/max(base, 1))))
}

// Capacity is Σ speeds in samples per second for a base batch of base.
func (c Config) Capacity(base int64) float64 {
	var s float64
	for i := range c.Workers {
		m := c.Models[i%len(c.Models)]
		s += float64(base) / (float64(m.Mean) * m.Slowdown / 1e9)
	}
	return s
}

// probeSteps is a probe round's steps at the base batch (node/worker's
// probeSteps, which this package may not import).
const probeSteps = 2

// allocation is one version of the batches, in force from iteration from
// (the fastest worker's clock + 1 when it was decided, so no worker was
// computing that iteration yet: every worker's round uses one version).
// blind marks the workers it carries no prediction for: under local
// rounds they take probe rounds (node/worker's next).
type allocation struct {
	from    int64
	batches []int64
	blind   []bool
}

// RunBalance simulates cfg through a gate of policy p with the balance
// layer on when balanced, else with every batch at bc.Base (the same
// compute times as Run's, for comparison in samples). Deterministic for a
// given cfg and bc.
func RunBalance(cfg Config, p clock.Policy, bc BalanceConfig, balanced bool) (BalanceResult, error) {
	if err := cfg.Validate(); err != nil {
		return BalanceResult{}, err
	}
	if bc.Base < 1 || bc.Overhead < 0 {
		return BalanceResult{}, fmt.Errorf("sim: base batch %d and overhead %v: want ≥ 1 and ≥ 0", bc.Base, bc.Overhead)
	}
	if bc.LocalSteps < 0 {
		return BalanceResult{}, fmt.Errorf("sim: local steps %d: want ≥ 0", bc.LocalSteps)
	}
	unit := bc.Base * int64(max(bc.LocalSteps, 1)) // a round's samples at the base batch
	bc.Balancer.Base = unit
	bc.Balancer.Min = max(1, unit/8)
	bal, err := balance.New(bc.Balancer)
	if err != nil {
		return BalanceResult{}, err
	}
	g, err := clock.NewGate(p)
	if err != nil {
		return BalanceResult{}, err
	}
	n := cfg.Workers
	ids := make([]clock.WorkerID, n)
	index := make(map[clock.WorkerID]int, n)
	samplers := newSamplers(cfg.Models, cfg.Seed, n)
	heldSince := make([]int64, n)
	batch := make([]int64, n)    // the batch of the iteration being computed
	computed := make([]int64, n) // its compute time
	for i := range n {
		ids[i] = clock.WorkerID(fmt.Sprintf("w%05d", i))
		index[ids[i]] = i
		if _, err := g.AddWorker(ids[i]); err != nil {
			return BalanceResult{}, err
		}
		bal.Join(string(ids[i]), 0)
	}
	current := func(from int64) allocation {
		a := bal.Allocation()
		out := allocation{from: from, batches: make([]int64, n), blind: make([]bool, n)}
		for _, w := range a.Workers {
			i := index[clock.WorkerID(w.Worker)]
			out.batches[i], out.blind[i] = w.Batch, w.PredictNs <= 0
		}
		return out
	}
	versions := []allocation{current(0)}
	if !balanced {
		for i := range versions[0].batches {
			versions[0].batches[i], versions[0].blind[i] = unit, false
		}
	}
	// batchAt is worker i's batch at iter: its share, or under local
	// rounds a probe of 2 steps while its share carries no prediction.
	batchAt := func(i int, iter int64) int64 {
		v := versions[0]
		for k := len(versions) - 1; k > 0; k-- {
			if versions[k].from <= iter {
				v = versions[k]
				break
			}
		}
		if v.blind[i] && bc.LocalSteps > 1 {
			return min(v.batches[i], probeSteps*bc.Base)
		}
		return v.batches[i]
	}
	q := &eventQueue{}
	var now int64
	lat := int64(cfg.Latency)
	start := func(i int, at int64) {
		iter, _ := g.Clock(ids[i])
		batch[i] = batchAt(i, iter)
		d := RoundSteps(batch[i], bc.Base, bc.LocalSteps)*int64(bc.Overhead) + samplers.next(i)*batch[i]/bc.Base
		computed[i] = max(1, d)
		q.push(event{at: at + computed[i], worker: int32(i)})
	}
	for i := range n {
		start(i, 0)
	}
	var (
		held, gapSum, releases, maxGap, samples int64
		decided                                 int64 // rounds given to Decide
		budget                                  = int64(n) * int64(cfg.Iters)
	)
	release := func(i int, gap int64) {
		releases++
		gapSum += gap
		maxGap = max(maxGap, gap)
		start(i, now+lat)
	}
	for pushes := int64(0); pushes < budget; pushes++ {
		if q.len() == 0 {
			return BalanceResult{}, fmt.Errorf("sim: %s deadlocked after %d pushes", p, pushes)
		}
		ev := q.pop()
		now = ev.at
		i := int(ev.worker)
		iter, _ := g.Clock(ids[i])
		out, err := g.Push(ids[i], iter, now)
		if err != nil {
			return BalanceResult{}, err
		}
		samples += batch[i]
		if balanced {
			bal.Observe(string(ids[i]), batch[i], computed[i])
			for ; decided < g.Min(); decided++ {
				if bal.Decide(decided + 1) {
					versions = append(versions, current(g.Max()+1))
					if len(versions) > 64 {
						versions = append(versions[:1:1], versions[len(versions)-32:]...)
					}
				}
			}
		}
		if out.Released {
			release(i, out.Gap)
		} else {
			heldSince[i] = now
		}
		for _, r := range out.Others {
			j := index[r.Worker]
			held += now - heldSince[j]
			c, _ := g.Clock(r.Worker)
			release(j, c-g.Min())
		}
	}
	for _, id := range g.Waiting() {
		held += now - heldSince[index[id.Worker]]
	}
	res := BalanceResult{
		Result: Result{Policy: p, Pushes: budget, SimTime: time.Duration(now), MaxGap: maxGap,
			Stats: g.Totals(), MinWorkerIters: g.Min(), MaxWorkerIters: g.Max()},
		Balanced: balanced, Samples: samples, Batches: versions[len(versions)-1].batches,
	}
	st := bal.Stats()
	res.Moves, res.Reversed = st.Moves, st.Reversed
	if now > 0 {
		res.ItersPerSec = float64(budget) / (float64(now) / 1e9)
		res.WaitFraction = float64(held) / (float64(now) * float64(n))
		res.Utilisation = float64(samples) / (float64(now) / 1e9 * cfg.Capacity(bc.Base))
	}
	if releases > 0 {
		res.MeanGap = float64(gapSum) / float64(releases)
	}
	return res, nil
}
