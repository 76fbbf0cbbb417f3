package sim

import (
	"fmt"
	"time"

	"dsspmesh/clock"
)

// Config is one simulated mesh.
type Config struct {
	Workers int
	// Models[i % len(Models)] is worker i's compute model.
	Models []Model
	// Latency is the push round trip: a released worker starts computing
	// Latency after the gate's decision (half out, half back).
	Latency time.Duration
	// Iters is the mean iterations per worker: the run stops after
	// Workers×Iters pushes in total.
	Iters int
	Seed  uint64
}

// DefaultConfig is 4 equal workers of 100 ms ±10%, 1000 iterations each.
func DefaultConfig() Config {
	return Config{
		Workers: 4,
		Models:  []Model{{Dist: Jitter, Mean: 100 * time.Millisecond, Spread: 0.1, Slowdown: 1}},
		Iters:   1000,
		Seed:    1,
	}
}

// Validate names the bad value.
func (c Config) Validate() error {
	switch {
	case c.Workers < 1:
		return fmt.Errorf("sim: workers %d must be at least 1", c.Workers)
	case c.Iters < 1:
		return fmt.Errorf("sim: iters %d must be at least 1", c.Iters)
	case c.Latency < 0:
		return fmt.Errorf("sim: latency %v must not be negative", c.Latency)
	case len(c.Models) == 0:
		return fmt.Errorf("sim: no compute model")
	case int64(c.Workers)*int64(c.Iters) > 1<<40:
		return fmt.Errorf("sim: %d workers × %d iters is too many pushes", c.Workers, c.Iters)
	}
	for i, m := range c.Models {
		if err := m.Validate(); err != nil {
			return fmt.Errorf("model %d: %w", i, err)
		}
	}
	return nil
}

// Result is one paradigm's run.
type Result struct {
	Policy clock.Policy
	Pushes int64
	// SimTime is the simulated time at the last push.
	SimTime time.Duration
	// ItersPerSec is Pushes per simulated second.
	ItersPerSec float64
	// WaitFraction is the share of worker-time spent held by the gate.
	WaitFraction float64
	// MeanGap and MaxGap are over every release: t_w − t_min when w was let
	// go (the staleness it proceeds with).
	MeanGap float64
	MaxGap  int64
	// Per-worker iterations done by the fastest and slowest worker.
	MinWorkerIters, MaxWorkerIters int64
	clock.Stats
}

// Run simulates cfg through a gate of policy p.
func Run(cfg Config, p clock.Policy) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	g, err := clock.NewGate(p)
	if err != nil {
		return Result{}, err
	}
	n := cfg.Workers
	ids := make([]clock.WorkerID, n)
	slots := make([]clock.Slot, n)
	samplers := newSamplers(cfg.Models, cfg.Seed, n)
	heldSince := make([]int64, n)
	q := newQueue(cfg)
	for i := range n {
		ids[i] = workerID(i)
		if _, err := g.AddWorker(ids[i]); err != nil {
			return Result{}, err
		}
		slots[i], _ = g.Slot(ids[i])
		q.push(event{at: samplers.next(i), worker: int32(i)})
	}
	var (
		held, gapSum int64
		releases     int64
		maxGap       int64
		now          int64
		budget       = int64(n) * int64(cfg.Iters)
		lat          = int64(cfg.Latency)
	)
	// iters[i] is worker i's clock: the iteration of its next push.
	iters := make([]int64, n)
	var out clock.Outcome // reused: its Others array too
	release := func(i int, gap int64) {
		releases++
		gapSum += gap
		maxGap = max(maxGap, gap)
		q.push(event{at: now + lat + samplers.next(i), worker: int32(i)})
	}
	for pushes := int64(0); pushes < budget; pushes++ {
		if q.len() == 0 {
			return Result{}, fmt.Errorf("sim: %s deadlocked after %d pushes", p, pushes)
		}
		// The pusher's next push, if it is let go, is queued before the
		// others this push releases, so seq numbers them in that order.
		ev := q.pop()
		now = ev.at
		i := int(ev.worker)
		if err := g.PushSlotInto(slots[i], iters[i], now, &out); err != nil {
			return Result{}, err
		}
		iters[i]++
		if out.Released {
			releases++
			gapSum += out.Gap
			maxGap = max(maxGap, out.Gap)
			q.push(event{at: now + lat + samplers.next(i), worker: int32(i)})
		} else {
			heldSince[i] = now
		}
		for _, r := range out.Others {
			j := workerIndex(r.Worker)
			held += now - heldSince[j]
			release(j, r.Iter+1-g.Min())
		}
	}
	for _, id := range g.Waiting() {
		held += now - heldSince[workerIndex(id.Worker)]
	}
	res := Result{
		Policy: p, Pushes: budget, SimTime: time.Duration(now), MaxGap: maxGap,
		Stats: g.Totals(), MinWorkerIters: g.Min(), MaxWorkerIters: g.Max(),
	}
	if now > 0 {
		res.ItersPerSec = float64(budget) / (float64(now) / 1e9)
		res.WaitFraction = float64(held) / (float64(now) * float64(n))
	}
	if releases > 0 {
		res.MeanGap = float64(gapSum) / float64(releases)
	}
	return res, nil
}

// newQueue sizes a calendar queue for cfg: slots about the mean gap
// between pushes when no one waits (1 / Σ 1/(latency + mean·slowdown)),
// the window twice the slowest worker's mean round. Only speed depends on
// the sizing, never the order of events.
func newQueue(cfg Config) *calendarQueue {
	var rate, longest float64
	for i := range cfg.Workers {
		m := cfg.Models[i%len(cfg.Models)]
		d := float64(cfg.Latency) + float64(m.Mean)*m.Slowdown
		rate += 1 / d
		longest = max(longest, d)
	}
	return newCalendarQueue(cfg.Workers, 1/rate, 2*longest)
}

// workerID names simulated worker i: "w" and i in at least 5 digits, so
// that the ids sort in worker order.
func workerID(i int) clock.WorkerID { return clock.WorkerID(fmt.Sprintf("w%05d", i)) }

// workerIndex is workerID's inverse, for the ids of released workers: a
// parse, cheaper than a map lookup per release.
func workerIndex(id clock.WorkerID) int {
	i := 0
	for _, c := range id[1:] {
		i = 10*i + int(c-'0')
	}
	return i
}
