package bench

import (
	"math"
	"strings"
	"testing"
	"time"

	"dsspmesh/node/launch"
)

func TestIterCosts(t *testing.T) {
	head := []string{"elapsed_s", "node", "id", "up", "iter", "iters_per_sec", "compute_s", "wait_s", "loss", "slices_kept", "slices_pulled"}
	row := func(at string, node, iter string, compute, wait string) []string {
		return []string{at, node, "n" + node, "true", iter, "0", compute, wait, "0", "0", "0"}
	}
	rows := [][]string{head,
		// Node 1 has not iterated yet: not a steady poll.
		row("1.000", "0", "3", "0.1", "0.2"), row("1.000", "1", "0", "0", "0"),
		// Node 1 joined 5 clocks up: an offset, not a gap.
		row("2.000", "0", "10", "1.0", "1.0"), row("2.000", "1", "15", "0.5", "1.5"),
		row("3.000", "0", "20", "1.5", "1.5"), row("3.000", "1", "27", "0.9", "2.1"),
		row("4.000", "0", "30", "2.0", "2.0"), row("4.000", "1", "35", "1.3", "2.7"),
	}
	evals := []launch.EvalPoint{{Elapsed: 1500 * time.Millisecond, Accuracy: 0.5}, {Elapsed: 3500 * time.Millisecond, Accuracy: 0.95}}
	c, err := iterCosts(rows, evals, []float64{0.95, 0.97})
	if err != nil {
		t.Fatal(err)
	}
	if c.Steady != 2*time.Second || c.Spread != 2 {
		t.Fatalf("steady %v spread %d, want 2s and 2", c.Steady, c.Spread)
	}
	want := []WorkerIterCost{{Iters: 20, IterMs: 100, ComputeMs: 50, WaitMs: 50}, {Iters: 20, IterMs: 100, ComputeMs: 40, WaitMs: 60}}
	for k, w := range want {
		g := c.Nodes[k]
		if g.Iters != w.Iters || math.Abs(g.IterMs-w.IterMs) > 1e-9 || math.Abs(g.ComputeMs-w.ComputeMs) > 1e-9 || math.Abs(g.WaitMs-w.WaitMs) > 1e-9 {
			t.Errorf("node %d: %+v, want %+v", k, g, w)
		}
	}
	if c.AtTarget[0] != 23.5 || !math.IsNaN(c.AtTarget[1]) {
		t.Errorf("at targets %v, want [23.5 NaN]", c.AtTarget)
	}
	md := CostsMarkdown([]RunIterCost{c}, []float64{0.95, 0.97})
	for _, s := range []string{"100 = 50 + 50; 100 = 40 + 60", "| 2 |", " 24 |", "not reached"} {
		if !strings.Contains(md, s) {
			t.Errorf("markdown lacks %q:\n%s", s, md)
		}
	}
	if _, err := iterCosts([][]string{{"elapsed_s"}, {"1"}}, nil, nil); err == nil {
		t.Error("a workers.csv without its columns was accepted")
	}
}
