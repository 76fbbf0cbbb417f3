package chart

import (
	"bufio"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"slices"
	"strconv"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Chart is one chart of 800 × 500 pixels.
type Chart struct {
	Title, XLabel, YLabel string
	// YMin and YMax fix the y axis when YMax > YMin; otherwise it spans
	// the data, widened to round ticks. The x axis always spans the data.
	YMin, YMax float64
	Series     []Series
	// LegendRight puts the legend in a column right of the axes, where
	// it covers no point however many entries it has; otherwise it sits
	// inside the axes' lower right.
	LegendRight bool
}

// Series is one set of points, drawn in order.
type Series struct {
	Name string // its legend entry; "" for none
	X, Y []float64
	// Color is the series' colour; zero takes the next of a palette of
	// ten, in the order of the chart's series that have none.
	Color color.RGBA
	Line  bool // join the points
	Dots  bool // a dot at each point
	// Dashed draws the line (and the marks) in dashes; Width is the
	// line's width in pixels (0: 1).
	Dashed bool
	Width  int
	// Vertical draws each X as a line across the whole y range (Y is not
	// read): instants, not values.
	Vertical bool
}

// The chart's size in pixels, and a legend row's height.
const width, height, lineH = 800, 500, 15

var (
	face      = basicfont.Face7x13
	black     = color.RGBA{A: 255}
	gridColor = color.RGBA{R: 225, G: 225, B: 225, A: 255}
	palette   = []color.RGBA{{78, 121, 167, 255}, {242, 142, 43, 255}, {225, 87, 89, 255}, {118, 183, 178, 255},
		{89, 161, 79, 255}, {237, 201, 72, 255}, {176, 122, 161, 255}, {255, 157, 167, 255}, {156, 117, 95, 255}, {186, 176, 172, 255}}
)

// colored is c's series with a colour each: those without one take the
// palette's, in turn.
func (c Chart) colored() []Series {
	out := slices.Clone(c.Series)
	next := 0
	for i := range out {
		if out[i].Color == (color.RGBA{}) {
			out[i].Color = palette[next%len(palette)]
			next++
		}
	}
	return out
}

// WritePNG draws the chart into a PNG file at path.
func (c Chart) WritePNG(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	w := bufio.NewWriter(f)
	if err := png.Encode(w, c.draw()); err != nil {
		f.Close()
		return fmt.Errorf("chart: %s: %w", path, err)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("chart: %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("chart: %s: %w", path, err)
	}
	return nil
}

// axis maps a range of values onto a range of pixels, with its ticks.
type axis struct {
	lo, hi, step float64
	p0, p1       int // the pixels of lo and hi
}

func (a axis) pixel(v float64) int {
	return a.p0 + int(math.Round((v-a.lo)/(a.hi-a.lo)*float64(a.p1-a.p0)))
}

func (a axis) ticks() []float64 {
	var out []float64
	for i := math.Ceil(a.lo/a.step - 1e-9); i*a.step <= a.hi+a.step*1e-9; i++ {
		out = append(out, i*a.step)
	}
	return out
}

func (a axis) label(v float64) string {
	if v == 0 {
		v = 0 // not -0
	}
	return strconv.FormatFloat(v, 'f', max(0, -int(math.Floor(math.Log10(a.step)+1e-9))), 64)
}

// newAxis spans [lo, hi] with about six round steps (1, 2 or 5 × 10^k);
// unless fixed, the span is widened to whole steps.
func newAxis(lo, hi float64, fixed bool) axis {
	if !(hi > lo) {
		lo, hi = lo-0.5, hi+0.5
		if lo == -0.5 && hi == 0.5 {
			lo, hi = 0, 1
		}
	}
	raw := (hi - lo) / 6
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * mag
	for _, m := range []float64{1, 2, 5} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	if !fixed {
		lo, hi = math.Floor(lo/step)*step, math.Ceil(hi/step)*step
	}
	return axis{lo: lo, hi: hi, step: step}
}

// span is the range of the finite values of vs over every series (xs or ys).
func (c Chart) span(ys bool) (lo, hi float64, ok bool) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, s := range c.Series {
		if ys && s.Vertical {
			continue
		}
		for i := range s.X {
			v := s.X[i]
			if ys {
				if i >= len(s.Y) {
					break
				}
				v = s.Y[i]
			}
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				lo, hi = min(lo, v), max(hi, v)
			}
		}
	}
	return lo, hi, lo <= hi
}

// layout places the axes' area and the legend's (empty when the legend
// is inside the axes or has no entry).
func (c Chart) layout() (plot, legend image.Rectangle) {
	const left, top, bottom, pad = 70, 30, 45, 10
	right := 20
	if c.LegendRight {
		if w := c.legendWidth(); w > 0 {
			right = w + 2*pad
			legend = image.Rect(width-right+pad, top, width-pad, top+lineH*c.legendEntries()+pad)
		}
	}
	return image.Rect(left, top, width-right, height-bottom), legend
}

func (c Chart) legendEntries() int {
	n := 0
	seen := map[string]bool{}
	for _, s := range c.Series {
		if s.Name != "" && !seen[s.Name] {
			seen[s.Name] = true
			n++
		}
	}
	return n
}

// legendWidth is the widest entry's: its sample, a gap and its name.
func (c Chart) legendWidth() int {
	w := 0
	for _, s := range c.Series {
		if s.Name != "" {
			w = max(w, 30+font.MeasureString(face, s.Name).Ceil())
		}
	}
	return w
}

func (c Chart) draw() *image.RGBA {
	c.Series = c.colored()
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	plot, legend := c.layout()

	xlo, xhi, ok := c.span(false)
	if !ok {
		xlo, xhi = 0, 1
	}
	x := newAxis(xlo, xhi, false)
	fixedY := c.YMax > c.YMin
	ylo, yhi := c.YMin, c.YMax
	if !fixedY {
		if ylo, yhi, ok = c.span(true); !ok {
			ylo, yhi = 0, 1
		}
	}
	y := newAxis(ylo, yhi, fixedY)
	x.p0, x.p1 = plot.Min.X, plot.Max.X-1
	y.p0, y.p1 = plot.Max.Y-1, plot.Min.Y

	cv := canvas{img: img, clip: plot}
	for _, v := range x.ticks() {
		px := x.pixel(v)
		cv.line(px, plot.Min.Y, px, plot.Max.Y-1, gridColor, 1, false)
		l := x.label(v)
		text(img, px-font.MeasureString(face, l).Ceil()/2, plot.Max.Y+15, l)
	}
	for _, v := range y.ticks() {
		py := y.pixel(v)
		cv.line(plot.Min.X, py, plot.Max.X-1, py, gridColor, 1, false)
		l := y.label(v)
		text(img, plot.Min.X-8-font.MeasureString(face, l).Ceil(), py+4, l)
	}
	outline(img, plot, black)
	text(img, (width-font.MeasureString(face, c.Title).Ceil())/2, 18, c.Title)
	text(img, plot.Min.X+(plot.Dx()-font.MeasureString(face, c.XLabel).Ceil())/2, height-10, c.XLabel)
	upright(img, 12, plot.Min.Y+(plot.Dy()+font.MeasureString(face, c.YLabel).Ceil())/2, c.YLabel)

	for _, s := range c.Series {
		cv.series(s, x, y)
	}
	c.drawLegend(img, plot, legend)
	return img
}

// series draws s's points on the axes x and y.
func (cv canvas) series(s Series, x, y axis) {
	w := max(1, s.Width)
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	if s.Vertical {
		for _, v := range s.X {
			if finite(v) {
				cv.line(x.pixel(v), y.p0, x.pixel(v), y.p1, s.Color, w, s.Dashed)
			}
		}
		return
	}
	havePrev, px0, py0 := false, 0, 0
	for i := 0; i < len(s.X) && i < len(s.Y); i++ {
		if !finite(s.X[i]) || !finite(s.Y[i]) {
			havePrev = false
			continue
		}
		px, py := x.pixel(s.X[i]), y.pixel(s.Y[i])
		if s.Line && havePrev {
			cv.line(px0, py0, px, py, s.Color, w, s.Dashed)
		}
		if s.Dots {
			cv.dot(px, py, s.Color)
		}
		havePrev, px0, py0 = true, px, py
	}
}

// drawLegend writes one entry per name: inside the axes' lower right, or
// in the legend's own area when it has one.
func (c Chart) drawLegend(img *image.RGBA, plot, legend image.Rectangle) {
	n, w := c.legendEntries(), c.legendWidth()
	if n == 0 {
		return
	}
	if legend.Empty() {
		legend = image.Rect(plot.Max.X-w-20, plot.Max.Y-n*lineH-18, plot.Max.X-8, plot.Max.Y-8)
		draw.Draw(img, legend, image.White, image.Point{}, draw.Src)
		outline(img, legend, gridColor)
	}
	cv := canvas{img: img, clip: img.Bounds()}
	seen := map[string]bool{}
	row := 0
	for _, s := range c.Series {
		if s.Name == "" || seen[s.Name] {
			continue
		}
		seen[s.Name] = true
		x0, yc := legend.Min.X+6, legend.Min.Y+6+row*lineH+lineH/2
		switch {
		case s.Line || s.Vertical:
			cv.line(x0, yc, x0+20, yc, s.Color, max(1, s.Width), s.Dashed)
			if s.Dots {
				cv.dot(x0+10, yc, s.Color)
			}
		default:
			cv.dot(x0+10, yc, s.Color)
		}
		text(img, x0+26, yc+4, s.Name)
		row++
	}
}

// canvas draws into img, within clip only.
type canvas struct {
	img  *image.RGBA
	clip image.Rectangle
}

func (cv canvas) set(x, y int, c color.RGBA) {
	if (image.Point{X: x, Y: y}).In(cv.clip) {
		cv.img.SetRGBA(x, y, c)
	}
}

// line draws from (x0, y0) to (x1, y1) w pixels wide (Bresenham's),
// dashed 6 on, 4 off when dashed.
func (cv canvas) line(x0, y0, x1, y1 int, c color.RGBA, w int, dashed bool) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for step := 0; ; step++ {
		if !dashed || step%(10*w) < 6*w {
			for i := -(w - 1) / 2; i <= w/2; i++ {
				for j := -(w - 1) / 2; j <= w/2; j++ {
					cv.set(x0+i, y0+j, c)
				}
			}
		}
		if x0 == x1 && y0 == y1 {
			return
		}
		if e2 := 2 * e; e2 >= dy {
			e += dy
			x0 += sx
		} else {
			e += dx
			y0 += sy
		}
	}
}

// dot is a filled disc of radius 2 at (x, y).
func (cv canvas) dot(x, y int, c color.RGBA) {
	for i := -2; i <= 2; i++ {
		for j := -2; j <= 2; j++ {
			if i*i+j*j <= 5 {
				cv.set(x+i, y+j, c)
			}
		}
	}
}

// outline draws r's border one pixel inside it.
func outline(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	cv := canvas{img: img, clip: img.Bounds()}
	cv.line(r.Min.X, r.Min.Y, r.Max.X-1, r.Min.Y, c, 1, false)
	cv.line(r.Min.X, r.Max.Y-1, r.Max.X-1, r.Max.Y-1, c, 1, false)
	cv.line(r.Min.X, r.Min.Y, r.Min.X, r.Max.Y-1, c, 1, false)
	cv.line(r.Max.X-1, r.Min.Y, r.Max.X-1, r.Max.Y-1, c, 1, false)
}

// text writes s in black with its baseline's left end at (x, y).
func text(dst draw.Image, x, y int, s string) {
	d := font.Drawer{Dst: dst, Src: image.NewUniform(black), Face: face, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

// upright writes s turned a quarter left, read bottom to top, its
// baseline at x and its start at y.
func upright(img *image.RGBA, x, y int, s string) {
	w := font.MeasureString(face, s).Ceil()
	if w == 0 {
		return
	}
	m := face.Metrics()
	h := (m.Ascent + m.Descent).Ceil()
	flat := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(flat, flat.Bounds(), image.White, image.Point{}, draw.Src)
	text(flat, 0, m.Ascent.Ceil(), s)
	for i := range w {
		for j := range h {
			if p := flat.RGBAAt(i, j); p != (color.RGBA{R: 255, G: 255, B: 255, A: 255}) {
				if pt := (image.Point{X: x - m.Ascent.Ceil() + j, Y: y - i}); pt.In(img.Bounds()) {
					img.SetRGBA(pt.X, pt.Y, p)
				}
			}
		}
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v > 0:
		return 1
	case v < 0:
		return -1
	}
	return 0
}
