package bench

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"dsspmesh/node/launch"
)

// NotReached is the time to a target a run did not reach.
const NotReached = time.Duration(math.MaxInt64)

// RunSummary is what one mesh run measured.
type RunSummary struct {
	Setting string
	Variant Variant
	Repeat  int
	Limit   time.Duration
	// ToTarget[i] is the time from the start of training (every node
	// started) to the first evaluation at or above Targets[i], or
	// NotReached.
	ToTarget []time.Duration
	// SamplesTo[i] is the training samples every worker together had
	// computed by the last poll at or before that evaluation (0 where
	// ToTarget[i] is NotReached): with ToTarget it separates a run that
	// trained faster from one that needed fewer samples.
	SamplesTo []float64
	FinalAcc  float64 // last evaluation (0 if none)
	Elapsed   time.Duration
	// ItersPerSec is the mesh's iterations per second (all workers
	// together), from the first poll at which every worker had completed
	// an iteration to the last poll, so start-up is not counted.
	ItersPerSec float64
	// Wait is each worker's share of its time spent pushing and held by
	// the gates (the rest is compute, stretched by --slowdown), at the end.
	Wait []float64
	// SamplesPerSec is the mesh's training samples per second over the
	// same window as ItersPerSec; BytesPerSample the tensor bytes every
	// worker's pushes sent and their replies returned (records.LocalWorker
	// PushBytes) per sample computed, at the end; Busy the mesh's
	// samples/s over the sum of each worker's own compute-only rate
	// (samples / compute seconds), both over the same window: the share
	// of the mesh's capacity used.
	// OfCeiling is SamplesPerSec over the machine's compute ceiling
	// (ParadigmsResult.Ceiling), 0 when not measured.
	SamplesPerSec  float64
	BytesPerSample float64
	Busy           float64
	OfCeiling      float64
	Evals          []launch.EvalPoint
	// Load is the machine's 1-minute load average when the run ended (0
	// where /proc/loadavg is missing): on a shared machine it says how
	// much of a slow run was other people's work.
	Load float64
	Err  string
}

func (s *RunSummary) fill(r *launch.Result, targets []float64) {
	s.Elapsed = r.Elapsed
	s.Evals = r.Evals
	s.ToTarget = TimesToTargets(r.Evals, targets)
	s.SamplesTo = samplesAt(r.Samples, s.ToTarget)
	if r.Final != nil {
		s.FinalAcc = r.Final.Accuracy
	}
	s.ItersPerSec, s.Wait = rates(r.Samples)
	s.SamplesPerSec, s.BytesPerSample, s.Busy = throughput(r.Samples)
	s.Load = LoadAverage()
}

// throughput computes from launch's polls the mesh's samples/s (from the
// first poll at which every node had completed an iteration to the last),
// the push bytes per sample and the share of the workers' own capacity
// used (see RunSummary): each worker's samples over its compute seconds
// in the same window, so that a first round's start-up, outside the
// window's samples/s, is outside its capacity too.
func throughput(samples []launch.Sample) (perSec, bytesPerSample, busy float64) {
	polls, last := groupPolls(samples, func(s launch.Sample) uint64 { return s.Worker.Samples })
	perSec = pollRate(polls)
	from := map[int]launch.Sample{} // each node's sample at the window's first poll
	if i := slices.IndexFunc(polls, func(p poll) bool { return p.all }); i >= 0 {
		for _, s := range samples {
			if s.Elapsed == polls[i].at && s.Up {
				from[s.Node] = s
			}
		}
	}
	var bytes, n, capacity float64
	for node, s := range last {
		bytes += float64(s.Worker.PushBytes)
		n += float64(s.Worker.Samples)
		f := from[node] // zero when the node joined later: its whole run
		if c := s.Worker.ComputeSeconds - f.Worker.ComputeSeconds; c > 0 && s.Worker.Samples >= f.Worker.Samples {
			capacity += float64(s.Worker.Samples-f.Worker.Samples) / c
		}
	}
	if n > 0 {
		bytesPerSample = bytes / n
	}
	if capacity > 0 {
		busy = perSec / capacity
	}
	return perSec, bytesPerSample, busy
}

// poll is one of launch's polls: its elapsed time, the sum of a counter
// over its samples and whether every node was up with at least one
// iteration.
type poll struct {
	at    time.Duration
	count uint64
	all   bool
}

// groupPolls splits launch's samples (one Sample per node per poll, in
// poll order) into polls, summing count over each poll's samples, and
// returns each node's last sample taken while it was up.
func groupPolls(samples []launch.Sample, count func(launch.Sample) uint64) ([]poll, map[int]launch.Sample) {
	var polls []poll
	last := map[int]launch.Sample{}
	for i := 0; i < len(samples); {
		p := poll{at: samples[i].Elapsed, all: true}
		j := i
		for ; j < len(samples) && samples[j].Elapsed == p.at; j++ {
			s := samples[j]
			p.count += count(s)
			if !s.Up || s.Worker.Iter == 0 {
				p.all = false
			}
			if s.Up {
				last[s.Node] = s
			}
		}
		polls = append(polls, p)
		i = j
	}
	return polls, last
}

// pollRate is the counter's rate per second from the first poll at which
// every node had completed an iteration to the last poll, or 0 when no
// such poll comes before the last.
func pollRate(polls []poll) float64 {
	first := slices.IndexFunc(polls, func(p poll) bool { return p.all })
	if first < 0 || first == len(polls)-1 {
		return 0
	}
	a, b := polls[first], polls[len(polls)-1]
	return float64(b.count-a.count) / (b.at - a.at).Seconds()
}

// LoadAverage is the 1-minute load average from /proc/loadavg, or 0.
func LoadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _, _ := strings.Cut(string(b), " ")
	v, _ := strconv.ParseFloat(f, 64)
	return v
}

// TimesToTargets returns, per target, the elapsed time of the first
// evaluation at or above it, or NotReached.
func TimesToTargets(evals []launch.EvalPoint, targets []float64) []time.Duration {
	out := make([]time.Duration, len(targets))
	for i, t := range targets {
		out[i] = NotReached
		for _, e := range evals {
			if e.Accuracy >= t {
				out[i] = e.Elapsed
				break
			}
		}
	}
	return out
}

// samplesAt is, for each time in at (NotReached: 0), the samples the
// workers had computed by then: each node's count at its last poll at or
// before it while up, summed over the nodes.
func samplesAt(samples []launch.Sample, at []time.Duration) []float64 {
	out := make([]float64, len(at))
	for i, t := range at {
		if t == NotReached {
			continue
		}
		by := map[int]uint64{}
		for _, s := range samples {
			if s.Elapsed <= t && s.Up {
				by[s.Node] = s.Worker.Samples
			}
		}
		for _, n := range by {
			out[i] += float64(n)
		}
	}
	return out
}

// rates computes the mesh's iterations/s and each node's final wait share
// from launch's polls (one Sample per node per poll, in poll order).
func rates(samples []launch.Sample) (float64, []float64) {
	nodes := 0
	for _, s := range samples {
		nodes = max(nodes, s.Node+1)
	}
	polls, last := groupPolls(samples, func(s launch.Sample) uint64 { return s.Worker.Iter })
	wait := make([]float64, nodes)
	for n, s := range last {
		if t := s.Worker.ComputeSeconds + s.Worker.WaitSeconds; t > 0 {
			wait[n] = s.Worker.WaitSeconds / t
		}
	}
	return pollRate(polls), wait
}

// Line is a one-line summary for the progress view.
func (s RunSummary) Line(targets []float64) string {
	var b strings.Builder
	for i, t := range targets {
		fmt.Fprintf(&b, "%.0f%%: %s  ", 100*t, fmtTime(s.ToTarget[i], s.Limit))
	}
	fmt.Fprintf(&b, "final %.2f%%  %.1f it/s  %.0f samples/s  %.0f B/sample  busy %.2f", 100*s.FinalAcc, s.ItersPerSec, s.SamplesPerSec, s.BytesPerSample, s.Busy)
	if s.OfCeiling > 0 {
		fmt.Fprintf(&b, "  %.2f of ceiling", s.OfCeiling)
	}
	fmt.Fprintf(&b, "  wait %s  load %.1f", fmtShares(s.Wait), s.Load)
	if s.Err != "" {
		b.WriteString("  error: " + s.Err)
	}
	return b.String()
}

// Cell is the median of one (setting, variant) over its repeats.
type Cell struct {
	Setting     string
	Variant     Variant
	Runs        int
	ToTarget    []time.Duration // median; NotReached if the median run did not reach it
	SamplesTo   []float64       // median; 0 if the median run did not reach it
	ReachedBy   []int           // how many runs reached each target
	FinalAcc    float64
	ItersPerSec float64
	Wait        []float64 // per worker, median over runs
	Load        float64   // median 1-minute load average at the runs' ends
	// Medians of the runs' RunSummary fields of the same names.
	SamplesPerSec, BytesPerSample, Busy, OfCeiling float64
	Errors                                         int
}

// Cells groups runs by (setting, variant) in the order first seen and takes
// medians. A run that did not reach a target counts as infinitely late, so
// the median is "not reached" when at least half the runs missed it.
func Cells(runs []RunSummary, targets int) []Cell {
	var out []Cell
	idx := map[[2]string]int{}
	var groups [][]RunSummary
	for _, r := range runs {
		k := [2]string{r.Setting, string(r.Variant)}
		i, ok := idx[k]
		if !ok {
			i = len(groups)
			idx[k] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], r)
	}
	for _, g := range groups {
		c := Cell{Setting: g[0].Setting, Variant: g[0].Variant, Runs: len(g),
			ToTarget: make([]time.Duration, targets), SamplesTo: make([]float64, targets), ReachedBy: make([]int, targets)}
		for t := range targets {
			var ts []time.Duration
			var ns []float64
			for _, r := range g {
				d, n := NotReached, math.Inf(1)
				if t < len(r.ToTarget) {
					d = r.ToTarget[t]
				}
				if d != NotReached {
					c.ReachedBy[t]++
					if t < len(r.SamplesTo) {
						n = r.SamplesTo[t]
					}
				}
				ts, ns = append(ts, d), append(ns, n)
			}
			c.ToTarget[t] = MedianDuration(ts)
			if m := Median(ns); !math.IsInf(m, 0) && c.ToTarget[t] != NotReached {
				c.SamplesTo[t] = m
			}
		}
		var acc, ips, load, sps, bps, busy, ceil []float64
		workers := 0
		for _, r := range g {
			sps, bps = append(sps, r.SamplesPerSec), append(bps, r.BytesPerSample)
			busy, ceil = append(busy, r.Busy), append(ceil, r.OfCeiling)
			acc = append(acc, r.FinalAcc)
			ips = append(ips, r.ItersPerSec)
			load = append(load, r.Load)
			workers = max(workers, len(r.Wait))
			if r.Err != "" {
				c.Errors++
			}
		}
		c.FinalAcc, c.ItersPerSec, c.Load = Median(acc), Median(ips), Median(load)
		c.SamplesPerSec, c.BytesPerSample, c.Busy, c.OfCeiling = Median(sps), Median(bps), Median(busy), Median(ceil)
		c.Wait = make([]float64, workers)
		for w := range workers {
			var ws []float64
			for _, r := range g {
				if w < len(r.Wait) {
					ws = append(ws, r.Wait[w])
				}
			}
			c.Wait[w] = Median(ws)
		}
		out = append(out, c)
	}
	return out
}

// Median of v (the mean of the two middle values for an even count); 0
// for none.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// MedianDuration is Median for durations where NotReached is infinite: the
// median of an even count is NotReached if either middle value is.
func MedianDuration(v []time.Duration) time.Duration {
	if len(v) == 0 {
		return NotReached
	}
	s := slices.Sorted(slices.Values(v))
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	if s[m] == NotReached {
		return NotReached
	}
	return (s[m-1] + s[m]) / 2
}

func fmtTime(d, limit time.Duration) string {
	if d == NotReached {
		return fmt.Sprintf("not reached in %s", limit.Round(time.Second))
	}
	return fmt.Sprintf("%.1fs", d.Seconds())
}

func fmtShares(v []float64) string {
	s := make([]string, len(v))
	for i, f := range v {
		s[i] = fmt.Sprintf("%.0f%%", 100*f)
	}
	return strings.Join(s, " ")
}
