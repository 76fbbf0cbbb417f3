package launch

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"dsspmesh/internal/chart"
)

// writeReport writes into dir:
//
//	workers.csv   one row per poll per node: elapsed_s, node, id, up, iter,
//	              iters_per_sec, compute_s, wait_s, loss, slices_kept, slices_pulled,
//	              batch, alloc_version, predicted_s (these three: --balance),
//	              samples, local_steps
//	accuracy.csv  one row per evaluation: elapsed_s, accuracy, loss, by
//	chaos.csv     one row per kill (only with chaos)
//	accuracy.png  test accuracy over time, the target dashed, kills marked
//	clocks.png    each worker's iteration over time, kills marked
func writeReport(dir string, r *Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	secs := func(d interface{ Seconds() float64 }) string { return strconv.FormatFloat(d.Seconds(), 'f', 3, 64) }
	var rows [][]string
	rows = append(rows, []string{"elapsed_s", "node", "id", "up", "iter", "iters_per_sec", "compute_s", "wait_s", "loss", "slices_kept", "slices_pulled", "batch", "alloc_version", "predicted_s", "samples", "local_steps"})
	for _, s := range r.Samples {
		rows = append(rows, []string{secs(s.Elapsed), strconv.Itoa(s.Node), s.ID, strconv.FormatBool(s.Up),
			strconv.FormatUint(s.Worker.Iter, 10), fmt.Sprintf("%.3f", s.Worker.ItersPerSec),
			fmt.Sprintf("%.3f", s.Worker.ComputeSeconds), fmt.Sprintf("%.3f", s.Worker.WaitSeconds), fmt.Sprintf("%.5f", s.Worker.Loss),
			strconv.FormatUint(s.Worker.SlicesKept, 10), strconv.FormatUint(s.Worker.SlicesPulled, 10),
			strconv.FormatInt(s.Worker.Batch, 10), strconv.FormatUint(s.Worker.AllocVersion, 10), fmt.Sprintf("%.4f", s.Worker.PredictedSeconds),
			strconv.FormatUint(s.Worker.Samples, 10), strconv.Itoa(s.Worker.LocalSteps)})
	}
	if err := writeCSV(filepath.Join(dir, "workers.csv"), rows); err != nil {
		return err
	}
	rows = [][]string{{"elapsed_s", "accuracy", "loss", "by"}}
	for _, e := range r.Evals {
		rows = append(rows, []string{secs(e.Elapsed), fmt.Sprintf("%.5f", e.Accuracy), fmt.Sprintf("%.5f", e.Loss), e.By})
	}
	if err := writeCSV(filepath.Join(dir, "accuracy.csv"), rows); err != nil {
		return err
	}
	if len(r.Chaos) > 0 {
		rows = [][]string{{"node", "id", "killed_s", "recovered_after_s", "survivors_training_after_s", "restarted_s", "rejoined_after_s"}}
		for _, c := range r.Chaos {
			rows = append(rows, []string{strconv.Itoa(c.Node), c.ID, secs(c.Killed), secs(c.Recovered), secs(c.Resumed), secs(c.Restarted), secs(c.Rejoined)})
		}
		if err := writeCSV(filepath.Join(dir, "chaos.csv"), rows); err != nil {
			return err
		}
	}
	for name, c := range map[string]chart.Chart{"accuracy.png": accuracyChart(r), "clocks.png": clocksChart(r)} {
		if err := c.WritePNG(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("report: %w", err)
		}
	}
	return nil
}

// The colours of the marks the charts share.
var (
	killColor   = color.RGBA{R: 200, A: 255}
	targetColor = color.RGBA{G: 150, B: 70, A: 255}
)

// kills marks each kill of the run across the chart.
func kills(r *Result) chart.Series {
	s := chart.Series{Color: killColor, Vertical: true, Dashed: true}
	for _, c := range r.Chaos {
		s.X = append(s.X, c.Killed.Seconds())
	}
	if len(s.X) > 0 {
		s.Name = "kill"
	}
	return s
}

// accuracyChart is the mesh's test accuracy over the run, with the run's
// target (if any) dashed across it.
func accuracyChart(r *Result) chart.Chart {
	acc := chart.Series{Name: "test accuracy", Color: color.RGBA{R: 40, G: 110, B: 190, A: 255}, Line: true, Dots: true}
	xmax := r.Elapsed.Seconds()
	for _, e := range r.Evals {
		acc.X, acc.Y = append(acc.X, e.Elapsed.Seconds()), append(acc.Y, e.Accuracy)
		xmax = max(xmax, e.Elapsed.Seconds())
	}
	c := chart.Chart{Title: "Test accuracy of the global parameters", XLabel: "time (s)", YLabel: "accuracy", YMin: 0, YMax: 1,
		Series: []chart.Series{acc, kills(r)}}
	if t := r.TargetAcc; t > 0 {
		c.Series = append(c.Series, chart.Series{Name: fmt.Sprintf("target %.2f%%", 100*t), X: []float64{0, max(xmax, 1)}, Y: []float64{t, t},
			Color: targetColor, Line: true, Dashed: true, Width: 2})
	}
	return c
}

// clocksChart is each worker's iteration over the run, one colour a node
// (chart's palette), its legend (an entry a node) beside the axes.
func clocksChart(r *Result) chart.Chart {
	byNode := map[int]*chart.Series{}
	for _, s := range r.Samples {
		if !s.Up {
			continue
		}
		if byNode[s.Node] == nil {
			byNode[s.Node] = &chart.Series{Dots: true}
		}
		ser := byNode[s.Node]
		ser.Name = fmt.Sprintf("node%d %s", s.Node, s.ID)
		ser.X, ser.Y = append(ser.X, s.Elapsed.Seconds()), append(ser.Y, float64(s.Worker.Iter))
	}
	c := chart.Chart{Title: "Worker clocks (iterations completed)", XLabel: "time (s)", YLabel: "iteration", LegendRight: true}
	for _, n := range slices.Sorted(maps.Keys(byNode)) {
		c.Series = append(c.Series, *byNode[n])
	}
	c.Series = append(c.Series, kills(r))
	return c
}

func writeCSV(path string, rows [][]string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	w := csv.NewWriter(f)
	w.WriteAll(rows)
	if err := w.Error(); err != nil {
		f.Close()
		return fmt.Errorf("report: %s: %w", path, err)
	}
	return f.Close()
}
