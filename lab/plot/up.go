package plot

import (
	"fmt"
	"image/color"
	"path/filepath"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"dsspmesh/node/launch"
)

// Up draws the charts of a `dssp up` report into dir (it is
// launch.Config.Charts there):
//
//	accuracy.png  test accuracy vs time, kills marked
//	clocks.png    each worker's iteration vs time, kills marked
func Up(dir string, r *launch.Result) error {
	if err := Accuracy(filepath.Join(dir, "accuracy.png"), r); err != nil {
		return err
	}
	return Clocks(filepath.Join(dir, "clocks.png"), r)
}

// Accuracy draws the mesh's test accuracy over the run into a PNG at path.
func Accuracy(path string, r *launch.Result) error {
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

// Clocks draws each worker's iteration over the run into a PNG at path.
func Clocks(path string, r *launch.Result) error {
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
