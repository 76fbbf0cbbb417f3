package plot

import (
	"bytes"
	"fmt"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"testing"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"dsspmesh/node"
	"dsspmesh/node/launch"
)

// TestUpDrawsBothCharts: a run's samples, evaluations and a kill become
// accuracy.png and clocks.png, each a PNG.
func TestUpDrawsBothCharts(t *testing.T) {
	r := &launch.Result{
		Evals: []launch.EvalPoint{{Elapsed: time.Second, Accuracy: 0.5}, {Elapsed: 2 * time.Second, Accuracy: 0.9}},
		Chaos: []launch.ChaosEvent{{Node: 1, Killed: 1500 * time.Millisecond}},
	}
	for i := range 3 {
		for n := range 2 {
			r.Samples = append(r.Samples, launch.Sample{Elapsed: time.Duration(i) * time.Second, Node: n, ID: "n", Up: true,
				Worker: node.LocalWorker{Iter: uint64(10 * i)}})
		}
	}
	dir := t.TempDir()
	if err := Up(dir, r); err != nil {
		t.Fatal(err)
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
}

// TestAccuracyDrawsTheTarget: the run's target accuracy is a line across
// accuracy.png, drawn in its own colour at the target's height.
func TestAccuracyDrawsTheTarget(t *testing.T) {
	r := &launch.Result{TargetAcc: 0.97, Elapsed: 60 * time.Second}
	for i := range 12 {
		r.Evals = append(r.Evals, launch.EvalPoint{Elapsed: time.Duration(5*i+1) * time.Second, Accuracy: 0.8 + 0.015*float64(i)})
	}
	rows := func(target float64) map[int]int {
		r.TargetAcc = target
		path := filepath.Join(t.TempDir(), "accuracy.png")
		if err := Accuracy(path, r); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		img, err := png.Decode(f)
		if err != nil {
			t.Fatal(err)
		}
		out := map[int]int{} // image row -> pixels of the target's colour
		b := img.Bounds()
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				if color.RGBAModel.Convert(img.At(x, y)) == targetColor {
					out[y]++
				}
			}
		}
		return out
	}
	if got := rows(0); len(got) != 0 {
		t.Fatalf("a run without a target has target-coloured pixels in rows %v", got)
	}
	got := rows(0.97)
	line := 0
	for _, n := range got {
		line = max(line, n)
	}
	if line < 200 {
		t.Fatalf("no target line: the target colour's longest row has %d pixels (%v)", line, got)
	}
}

// TestClocksLegendBesideTheAxes: the clocks chart's legend (one entry per
// node) has its own column right of the plot's area, so it covers no
// point however many nodes there are.
func TestClocksLegendBesideTheAxes(t *testing.T) {
	img := vgimg.New(width, height)
	dc := draw.New(img)
	leg := plot.NewLegend()
	for i := range 32 {
		s, err := plotter.NewScatter(plotter.XYs{{X: 0, Y: 0}})
		if err != nil {
			t.Fatal(err)
		}
		leg.Add(fmt.Sprintf("node%d node-0123abcd", i), s)
	}
	plotArea, legendArea := legendColumn(dc, &leg)
	if plotArea.Max.X > legendArea.Min.X {
		t.Errorf("the plot's area ends at x=%v, right of the legend's start %v", plotArea.Max.X, legendArea.Min.X)
	}
	if w := leg.Rectangle(legendArea).Size().X; legendArea.Min.X+w > dc.Max.X {
		t.Errorf("the legend (%v wide from %v) does not fit in the chart (%v)", w, legendArea.Min.X, dc.Max.X)
	}
	if plotArea.Size().X < dc.Size().X/2 {
		t.Errorf("the legend column leaves the plot only %v of %v", plotArea.Size().X, dc.Size().X)
	}
}
