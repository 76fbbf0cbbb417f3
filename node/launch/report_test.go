package launch

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"dsspmesh/node/records"
)

// TestWriteReportWritesCSVAndCharts: a run's samples, evaluations and a
// kill become the report's CSV files and its two charts, each a PNG,
// drawn by the product itself (no plotting library: internal/chart).
func TestWriteReportWritesCSVAndCharts(t *testing.T) {
	r := &Result{TargetAcc: 0.97, Elapsed: 3 * time.Second,
		Evals: []EvalPoint{{Elapsed: time.Second, Accuracy: 0.5, By: "n0"}, {Elapsed: 2 * time.Second, Accuracy: 0.9, By: "n0"}},
		Chaos: []ChaosEvent{{Node: 1, ID: "n1", Killed: 1500 * time.Millisecond}},
	}
	for i := range 3 {
		for n := range 2 {
			r.Samples = append(r.Samples, Sample{Elapsed: time.Duration(i) * time.Second, Node: n, ID: "n", Up: true,
				Worker: records.LocalWorker{Iter: uint64(10 * i)}})
		}
	}
	dir := t.TempDir()
	if err := writeReport(dir, r); err != nil {
		t.Fatal(err)
	}
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	if want := []string{"accuracy.csv", "accuracy.png", "chaos.csv", "clocks.png", "workers.csv"}; !slices.Equal(names, want) {
		t.Errorf("the report holds %v, want %v", names, want)
	}
	for _, name := range []string{"accuracy.png", "clocks.png"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
			t.Errorf("%s is not a PNG (%d bytes)", name, len(b))
		}
	}
	acc, clocks := accuracyChart(r), clocksChart(r)
	if len(acc.Series) != 3 || acc.Series[2].Y[0] != 0.97 || acc.Series[1].Name != "kill" {
		t.Errorf("accuracy chart: %+v, want the accuracy, the kill and the target at 0.97", acc.Series)
	}
	if len(clocks.Series) != 3 || !clocks.LegendRight || clocks.Series[0].Name != "node0 n" || clocks.Series[1].Name != "node1 n" {
		t.Errorf("clocks chart: %+v, want one series a node in order, the kill, the legend beside the axes", clocks.Series)
	}
}
