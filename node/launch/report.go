package launch

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// WriteReport writes into dir:
//
//	workers.csv   one row per poll per node: elapsed_s, node, id, up, iter,
//	              iters_per_sec, compute_s, wait_s, loss, slices_kept, slices_pulled,
//	              batch, alloc_version, predicted_s (the last three: --balance)
//	accuracy.csv  one row per evaluation: elapsed_s, accuracy, loss, by
//	chaos.csv     one row per kill (only with chaos)
//	accuracy.png  test accuracy vs time
//	clocks.png    each worker's iteration vs time
func WriteReport(dir string, r *Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	secs := func(d interface{ Seconds() float64 }) string { return strconv.FormatFloat(d.Seconds(), 'f', 3, 64) }
	var rows [][]string
	rows = append(rows, []string{"elapsed_s", "node", "id", "up", "iter", "iters_per_sec", "compute_s", "wait_s", "loss", "slices_kept", "slices_pulled", "batch", "alloc_version", "predicted_s"})
	for _, s := range r.Samples {
		rows = append(rows, []string{secs(s.Elapsed), strconv.Itoa(s.Node), s.ID, strconv.FormatBool(s.Up),
			strconv.FormatUint(s.Worker.Iter, 10), fmt.Sprintf("%.3f", s.Worker.ItersPerSec),
			fmt.Sprintf("%.3f", s.Worker.ComputeSeconds), fmt.Sprintf("%.3f", s.Worker.WaitSeconds), fmt.Sprintf("%.5f", s.Worker.Loss),
			strconv.FormatUint(s.Worker.SlicesKept, 10), strconv.FormatUint(s.Worker.SlicesPulled, 10),
			strconv.FormatInt(s.Worker.Batch, 10), strconv.FormatUint(s.Worker.AllocVersion, 10), fmt.Sprintf("%.4f", s.Worker.PredictedSeconds)})
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
	if err := plotAccuracy(filepath.Join(dir, "accuracy.png"), r); err != nil {
		return err
	}
	return plotClocks(filepath.Join(dir, "clocks.png"), r)
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

func plotAccuracy(path string, r *Result) error {
	p := plot.New()
	p.Title.Text = "Test accuracy of the global parameters"
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "accuracy"
	pts := make(plotter.XYs, len(r.Evals))
	for i, e := range r.Evals {
		pts[i] = plotter.XY{X: e.Elapsed.Seconds(), Y: e.Accuracy}
	}
	if len(pts) > 0 {
		line, dots, err := plotter.NewLinePoints(pts)
		if err != nil {
			return fmt.Errorf("report: %w", err)
		}
		line.Color = color.RGBA{R: 40, G: 110, B: 190, A: 255}
		dots.Color = line.Color
		p.Add(line, dots, plotter.NewGrid())
	}
	p.Y.Min, p.Y.Max = 0, 1
	for _, c := range r.Chaos {
		addVLine(p, c.Killed.Seconds(), color.RGBA{R: 200, A: 255})
	}
	return save(p, path)
}

func plotClocks(path string, r *Result) error {
	p := plot.New()
	p.Title.Text = "Worker clocks (iterations completed)"
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "iteration"
	byNode := map[int]plotter.XYs{}
	names := map[int]string{}
	for _, s := range r.Samples {
		if !s.Up {
			continue
		}
		byNode[s.Node] = append(byNode[s.Node], plotter.XY{X: s.Elapsed.Seconds(), Y: float64(s.Worker.Iter)})
		names[s.Node] = fmt.Sprintf("node%d %s", s.Node, s.ID)
	}
	nodes := make([]int, 0, len(byNode))
	for n := range byNode {
		nodes = append(nodes, n)
	}
	sort.Ints(nodes)
	p.Add(plotter.NewGrid())
	for i, n := range nodes {
		s, err := plotter.NewScatter(byNode[n])
		if err != nil {
			return fmt.Errorf("report: %w", err)
		}
		s.Color = plotutil.Color(i)
		s.Shape = plotutil.Shape(i)
		s.Radius = vg.Points(1.5)
		p.Add(s)
		p.Legend.Add(names[n], s)
	}
	p.Legend.Top, p.Legend.Left = true, true
	for _, c := range r.Chaos {
		addVLine(p, c.Killed.Seconds(), color.RGBA{R: 200, A: 255})
	}
	return save(p, path)
}

// addVLine marks an instant (a kill) across the plot's y range.
func addVLine(p *plot.Plot, x float64, c color.Color) {
	ln, err := plotter.NewLine(plotter.XYs{{X: x, Y: p.Y.Min}, {X: x, Y: p.Y.Max}})
	if err != nil {
		return
	}
	ln.Color = c
	ln.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
	p.Add(ln)
}

func save(p *plot.Plot, path string) error {
	if err := p.Save(8*vg.Inch, 5*vg.Inch, path); err != nil {
		return fmt.Errorf("report: %s: %w", path, err)
	}
	return nil
}
