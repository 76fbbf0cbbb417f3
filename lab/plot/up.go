package plot

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

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

// Chart size, and the colours of the marks every chart shares.
var (
	width, height = 8 * vg.Inch, 5 * vg.Inch
	killColor     = color.RGBA{R: 200, A: 255}
	targetColor   = color.RGBA{G: 150, B: 70, A: 255}
)

// Accuracy draws the mesh's test accuracy over the run into a PNG at path,
// with the run's target (r.TargetAcc, if any) as a dashed line.
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
		p.Legend.Add("test accuracy", line, dots)
	}
	p.Y.Min, p.Y.Max = 0, 1
	if t := r.TargetAcc; t > 0 {
		xmax := r.Elapsed.Seconds()
		if len(pts) > 0 {
			xmax = max(xmax, pts[len(pts)-1].X)
		}
		if ln, err := plotter.NewLine(plotter.XYs{{X: 0, Y: t}, {X: max(xmax, 1), Y: t}}); err == nil {
			ln.Color = targetColor
			ln.Width = vg.Points(2)
			ln.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
			p.Add(ln)
			p.Legend.Add(fmt.Sprintf("target %.2f%%", 100*t), ln)
		}
	}
	for i, c := range r.Chaos {
		if ln := addVLine(p, c.Killed.Seconds(), killColor); ln != nil && i == 0 {
			p.Legend.Add("kill", ln)
		}
	}
	// Accuracy rises to the top early: the lower right is where it is not.
	p.Legend.Top, p.Legend.Left = false, false
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
	for i, c := range r.Chaos {
		if ln := addVLine(p, c.Killed.Seconds(), killColor); ln != nil && i == 0 {
			p.Legend.Add("kill", ln)
		}
	}
	// One entry per node: inside the axes it would hide points, so it is
	// drawn in a column right of them.
	return saveLegendOutside(p, path)
}

// addVLine marks an instant (a kill) across the plot's y range.
func addVLine(p *plot.Plot, x float64, c color.Color) *plotter.Line {
	ln, err := plotter.NewLine(plotter.XYs{{X: x, Y: p.Y.Min}, {X: x, Y: p.Y.Max}})
	if err != nil {
		return nil
	}
	ln.Color = c
	ln.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
	p.Add(ln)
	return ln
}

func save(p *plot.Plot, path string) error {
	if err := p.Save(width, height, path); err != nil {
		return fmt.Errorf("report: %s: %w", path, err)
	}
	return nil
}

// legendColumn splits c into the plot's area and a column at its right
// edge as wide as leg's entries, for a legend that must not cover data.
func legendColumn(c draw.Canvas, leg *plot.Legend) (plotArea, legendArea draw.Canvas) {
	pad := vg.Points(8)
	w := leg.Rectangle(c).Size().X + 2*pad
	plotArea = draw.Crop(c, 0, -w, 0, 0)
	legendArea = draw.Crop(c, c.Size().X-w+pad, -pad, 0, -vg.Points(24)) // below the title's line
	return plotArea, legendArea
}

// saveLegendOutside writes p as a PNG at path with its legend in a
// column right of the axes.
func saveLegendOutside(p *plot.Plot, path string) error {
	leg := p.Legend
	leg.Top, leg.Left = true, true
	p.Legend = plot.NewLegend() // p.Draw draws this empty one
	img := vgimg.New(width, height)
	dc := draw.New(img)
	plotArea, legendArea := legendColumn(dc, &leg)
	p.Draw(plotArea)
	leg.Draw(legendArea)
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("report: %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("report: %s: %w", path, err)
	}
	return nil
}
