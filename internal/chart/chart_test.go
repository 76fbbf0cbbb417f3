package chart

import (
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"
)

var (
	blue   = color.RGBA{R: 40, G: 110, B: 190, A: 255}
	green  = color.RGBA{G: 150, B: 70, A: 255}
	red    = color.RGBA{R: 200, A: 255}
	orange = color.RGBA{R: 240, G: 140, B: 40, A: 255}
)

// count is, per image row (or column), the pixels of colour c.
func count(img image.Image, c color.RGBA, byColumn bool) map[int]int {
	out := map[int]int{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if color.RGBAModel.Convert(img.At(x, y)) == c {
				if byColumn {
					out[x]++
				} else {
					out[y]++
				}
			}
		}
	}
	return out
}

func longest(m map[int]int) (at, n int) {
	for k, v := range m {
		if v > n || v == n && k < at {
			at, n = k, v
		}
	}
	return at, n
}

// TestWritePNGDrawsTheMarks: a chart written to a file is a PNG of the
// chart's size in which each series shows where it should: the dashed
// target line is a row of its colour at the target's height, the kill a
// column of its colour at its time, the accuracy's points in theirs.
func TestWritePNGDrawsTheMarks(t *testing.T) {
	c := Chart{Title: "Test accuracy", XLabel: "time (s)", YLabel: "accuracy", YMin: 0, YMax: 1,
		Series: []Series{
			{Name: "test accuracy", X: []float64{1, 6, 11, 16, 21, math.NaN()}, Y: []float64{0.5, 0.7, 0.8, 0.85, 0.9, 0.95}, Color: blue, Line: true, Dots: true},
			{Name: "target 97.00%", X: []float64{0, 60}, Y: []float64{0.97, 0.97}, Color: green, Line: true, Dashed: true, Width: 2},
			{Name: "kill", X: []float64{30}, Color: red, Vertical: true, Dashed: true},
		}}
	path := filepath.Join(t.TempDir(), "accuracy.png")
	if err := c.WritePNG(path); err != nil {
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
	if b := img.Bounds(); b.Dx() != width || b.Dy() != height {
		t.Fatalf("%v, want %d × %d", b, width, height)
	}
	plot, _ := c.layout()
	y := newAxis(0, 1, true)
	y.p0, y.p1 = plot.Max.Y-1, plot.Min.Y
	row, n := longest(count(img, green, false))
	if n < 200 || abs(row-y.pixel(0.97)) > 1 {
		t.Errorf("target line: the longest green row is %d with %d pixels, want ≥ 200 at y %d", row, n, y.pixel(0.97))
	}
	x := newAxis(0, 60, false)
	x.p0, x.p1 = plot.Min.X, plot.Max.X-1
	col, n := longest(count(img, red, true))
	if n < plot.Dy()/2 || abs(col-x.pixel(30)) > 1 {
		t.Errorf("kill: the longest red column is %d with %d pixels, want ≥ %d at x %d", col, n, plot.Dy()/2, x.pixel(30))
	}
	if got := count(img, blue, false); len(got) < 10 {
		t.Errorf("the accuracy's line and dots cover %d rows", len(got))
	}
}

// TestLegendRightBesideTheAxes: a legend of many entries (one a node)
// has its own column right of the axes, inside the chart, so it covers
// no point; the axes keep most of the width.
func TestLegendRightBesideTheAxes(t *testing.T) {
	c := Chart{LegendRight: true}
	for i := range 32 {
		c.Series = append(c.Series, Series{Name: "node" + string(rune('a'+i%26)) + " node-0123abcd", X: []float64{0, 1}, Y: []float64{0, float64(i)}, Color: orange, Dots: true})
	}
	plot, legend := c.layout()
	if legend.Empty() || legend.Min.X < plot.Max.X || legend.Max.X > width || legend.Max.Y > height {
		t.Errorf("legend %v, axes %v, chart %d × %d", legend, plot, width, height)
	}
	if plot.Dx() < width/2 {
		t.Errorf("the legend leaves the axes %d of %d pixels", plot.Dx(), width)
	}
	img := c.draw()
	for x := plot.Min.X + 1; x < plot.Max.X-1; x++ {
		for y := plot.Min.Y + 1; y < plot.Max.Y-1; y++ {
			if p := img.RGBAAt(x, y); p == black {
				t.Fatalf("text drawn inside the axes at (%d, %d)", x, y)
			}
		}
	}
}

// TestPaletteColorsSeriesWithoutOne: series without a colour take the
// palette's in turn, each its own; a colour given is kept.
func TestPaletteColorsSeriesWithoutOne(t *testing.T) {
	c := Chart{Series: []Series{{Name: "a"}, {Name: "kill", Color: red}, {Name: "b"}, {Name: "c"}}}
	got := c.colored()
	if got[1].Color != red || got[0].Color == got[2].Color || got[2].Color == got[3].Color || got[0].Color == (color.RGBA{}) {
		t.Errorf("colours %v %v %v %v", got[0].Color, got[1].Color, got[2].Color, got[3].Color)
	}
	if c.Series[0].Color != (color.RGBA{}) {
		t.Error("colored wrote into the caller's series")
	}
}

// TestAxisTicksAreRound: ticks fall on 1, 2 or 5 × 10^k, about six of
// them, and a span that is not fixed widens to whole ticks.
func TestAxisTicksAreRound(t *testing.T) {
	for _, c := range []struct {
		lo, hi        float64
		fixed         bool
		wantLo, wantH float64
		step          float64
		label         string
	}{
		{0, 1, true, 0, 1, 0.2, "0.2"},
		{0, 57.3, false, 0, 60, 10, "10"},
		{3, 3, false, 2.4, 3.6, 0.2, "2.6"},
		{0, 0, false, 0, 1, 0.2, "0.2"},
		{1200, 9100, false, 0, 10000, 2000, "2000"},
	} {
		a := newAxis(c.lo, c.hi, c.fixed)
		if math.Abs(a.lo-c.wantLo) > 1e-9 || math.Abs(a.hi-c.wantH) > 1e-9 || math.Abs(a.step-c.step) > 1e-12 {
			t.Errorf("newAxis(%v, %v, %v) = [%v, %v] step %v, want [%v, %v] step %v", c.lo, c.hi, c.fixed, a.lo, a.hi, a.step, c.wantLo, c.wantH, c.step)
		}
		if got := a.label(a.ticks()[1]); got != c.label {
			t.Errorf("newAxis(%v, %v): second tick %q, want %q (ticks %v)", c.lo, c.hi, got, c.label, a.ticks())
		}
	}
	if got := newAxis(0, 1, true).label(math.Copysign(0, -1)); got != "0.0" {
		t.Errorf("a tick at -0 reads %q, want 0.0", got)
	}
}
