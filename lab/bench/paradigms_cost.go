package bench

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"dsspmesh/node/launch"
)

// WorkerIterCost is one worker's steady-state iteration in one mesh run: its
// iterations between the first poll at which every worker had iterated and
// the last poll, and the mean wall time of one, split into compute (as the
// worker measured it, stretched by --slowdown and --compute-delay) and
// wait (pushing and held by the gates). Wait is the mesh's cost per
// iteration where no gate holds the worker (ASP, or a balanced mesh whose
// workers finish together).
type WorkerIterCost struct {
	Iters                     int64
	IterMs, ComputeMs, WaitMs float64
}

// RunIterCost is the per-iteration cost of one mesh run (runs/<name>/ of a
// `dssp-lab bench paradigms` report).
type RunIterCost struct {
	Run    string
	Steady time.Duration // first poll with every worker iterating to the last
	// Spread is the largest difference, at one poll, between two workers'
	// iterations done since the first such poll: an observed stand-in for
	// the gate's clock gap (joining leaves constant offsets in the
	// counters, which it ignores; polls of the workers are up to a few ms
	// apart, which can add one).
	Spread int64
	Nodes  []WorkerIterCost
	// AtTarget is, per target, the workers' mean iteration counter at the
	// poll before the first evaluation at or above it (NaN: not reached).
	// Under BSP and under balance one iteration is one step on the global
	// batch, so it counts SGD steps to the target.
	AtTarget []float64
}

// LoadCosts reads every runs/*/workers.csv (and accuracy.csv) under dir,
// in name order.
func LoadCosts(dir string, targets []float64) ([]RunIterCost, error) {
	ents, err := os.ReadDir(filepath.Join(dir, "runs"))
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	var out []RunIterCost
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		rd := filepath.Join(dir, "runs", e.Name())
		rows, err := readCSV(filepath.Join(rd, "workers.csv"))
		if err != nil {
			continue // a mesh that failed before its report
		}
		evals, err := loadEvals(filepath.Join(rd, "accuracy.csv"))
		if err != nil {
			evals = nil
		}
		c, err := iterCosts(rows, evals, targets)
		if err != nil {
			return nil, fmt.Errorf("bench: %s: %w", rd, err)
		}
		c.Run = e.Name()
		out = append(out, c)
	}
	return out, nil
}

// costPoll is one poll of every node: iteration, compute and wait seconds.
type costPoll struct {
	at                time.Duration
	iter              []int64
	compute, wait     []float64
	complete, running bool
}

// iterCosts computes a RunIterCost from launch's workers.csv rows (header
// first: elapsed_s, node, id, up, iter, iters_per_sec, compute_s, wait_s,
// …).
func iterCosts(rows [][]string, evals []launch.EvalPoint, targets []float64) (RunIterCost, error) {
	var c RunIterCost
	if len(rows) < 2 {
		return c, fmt.Errorf("workers.csv has no rows")
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	for _, n := range []string{"elapsed_s", "node", "up", "iter", "compute_s", "wait_s"} {
		if _, ok := col[n]; !ok {
			return c, fmt.Errorf("workers.csv lacks column %q", n)
		}
	}
	nodes := 0
	for _, r := range rows[1:] {
		if len(r) != len(rows[0]) {
			return c, fmt.Errorf("workers.csv: a row of %d fields, want %d", len(r), len(rows[0]))
		}
		k, err := strconv.Atoi(r[col["node"]])
		if err != nil || k < 0 || k > 1<<16 {
			return c, fmt.Errorf("workers.csv: node %q", r[col["node"]])
		}
		nodes = max(nodes, k+1)
	}
	var polls []*costPoll
	for _, r := range rows[1:] {
		secs, _ := strconv.ParseFloat(r[col["elapsed_s"]], 64)
		at := time.Duration(secs * float64(time.Second))
		if len(polls) == 0 || polls[len(polls)-1].at != at {
			polls = append(polls, &costPoll{at: at, iter: make([]int64, nodes), compute: make([]float64, nodes),
				wait: make([]float64, nodes), complete: true, running: true})
		}
		p := polls[len(polls)-1]
		k, _ := strconv.Atoi(r[col["node"]])
		p.iter[k], _ = strconv.ParseInt(r[col["iter"]], 10, 64)
		p.compute[k], _ = strconv.ParseFloat(r[col["compute_s"]], 64)
		p.wait[k], _ = strconv.ParseFloat(r[col["wait_s"]], 64)
		if r[col["up"]] != "true" || p.iter[k] == 0 {
			p.running = false
		}
	}
	// A poll missing a node's row leaves its counters at 0.
	for _, p := range polls {
		p.running = p.running && !slices.Contains(p.iter, 0)
	}
	var full []*costPoll
	for _, p := range polls {
		if p.running {
			full = append(full, p)
		}
	}
	c.AtTarget = make([]float64, len(targets))
	for i, t := range targets {
		c.AtTarget[i] = math.NaN()
		j := slices.IndexFunc(evals, func(e launch.EvalPoint) bool { return e.Accuracy >= t })
		if j < 0 {
			continue
		}
		for _, p := range slices.Backward(polls) {
			if p.at <= evals[j].Elapsed {
				var sum float64
				for _, it := range p.iter {
					sum += float64(it)
				}
				c.AtTarget[i] = sum / float64(nodes)
				break
			}
		}
	}
	if len(full) < 2 {
		return c, nil
	}
	a, b := full[0], full[len(full)-1]
	c.Steady = b.at - a.at
	for _, p := range full {
		lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
		for k := range nodes {
			d := p.iter[k] - a.iter[k]
			lo, hi = min(lo, d), max(hi, d)
		}
		c.Spread = max(c.Spread, hi-lo)
	}
	c.Nodes = make([]WorkerIterCost, nodes)
	for k := range nodes {
		n := WorkerIterCost{Iters: b.iter[k] - a.iter[k]}
		if n.Iters > 0 {
			per := 1000 / float64(n.Iters)
			n.IterMs = c.Steady.Seconds() * per
			n.ComputeMs = (b.compute[k] - a.compute[k]) * per
			n.WaitMs = (b.wait[k] - a.wait[k]) * per
		}
		c.Nodes[k] = n
	}
	return c, nil
}

// CostsMarkdown is the table of LoadCosts: per run, each worker's
// ms/iteration = compute + wait, the spread, and the mean iteration at each
// target.
func CostsMarkdown(costs []RunIterCost, targets []float64) string {
	var b strings.Builder
	b.WriteString("| run | steady | per worker: ms/iter = compute + wait | max spread (iters) |")
	for _, t := range targets {
		fmt.Fprintf(&b, " mean iter at %s |", pct(t))
	}
	b.WriteString("\n|---|---:|---|---:|")
	for range targets {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for _, c := range costs {
		var ws []string
		for _, n := range c.Nodes {
			if n.Iters == 0 {
				ws = append(ws, "—")
				continue
			}
			ws = append(ws, fmt.Sprintf("%.0f = %.0f + %.0f", n.IterMs, n.ComputeMs, n.WaitMs))
		}
		fmt.Fprintf(&b, "| %s | %.0fs | %s | %d |", c.Run, c.Steady.Seconds(), strings.Join(ws, "; "), c.Spread)
		for _, v := range c.AtTarget {
			if math.IsNaN(v) {
				b.WriteString(" not reached |")
			} else {
				fmt.Fprintf(&b, " %.0f |", v)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}
