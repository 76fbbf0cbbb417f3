package cudaops

import "fmt"

// ParamSpec describes one parameter tensor of a layer.
type ParamSpec struct {
	Name  string // suffix such as "weight" or "bias"; the layout prefixes the layer name
	Shape []int
	FanIn int // inputs feeding each output; 0 means initialise to zero (biases)
}

// Size is the number of elements in the tensor.
func (p ParamSpec) Size() int { return prod(p.Shape) }

// Layer is one differentiable stage of a sequential network working on a
// batch of n samples stored back to back (per-sample shape InShape, NCHW
// for images).
//
// A Layer keeps scratch memory and the activations Backward needs, so one
// value serves one goroutine at a time; Clone gives an independent copy
// with the same configuration. Slices returned by Forward and Backward are
// owned by the layer and valid until its next call.
type Layer interface {
	Name() string
	InShape() []int
	OutShape() []int
	Params() []ParamSpec
	// Forward computes the output for the n samples in x. params holds one
	// slice per ParamSpec, in order.
	Forward(be Backend, params [][]float32, x []float32, n int) []float32
	// Backward takes the gradient of the loss with respect to the last
	// Forward's output, adds the parameter gradients into grads (one slice
	// per ParamSpec) and returns the gradient with respect to its input.
	Backward(be Backend, params, grads [][]float32, dy []float32, n int) []float32
	Clone() Layer
}

func prod(s []int) int {
	p := 1
	for _, v := range s {
		p *= v
	}
	return p
}

// grow returns buf resliced to n elements, reallocating only when too small.
func grow[T any](buf []T, n int) []T {
	if cap(buf) < n {
		return make([]T, n)
	}
	return buf[:n]
}

// Dense is a fully connected layer: y = x·Wᵀ + b with W stored [out, in].
type Dense struct {
	name    string
	in, out int
	x       []float32 // last input, not owned
	y, dx   []float32
	gw      []float32 // BackwardTo: the block of the gradient being handed out
}

// NewDense returns a dense layer mapping in features to out.
func NewDense(name string, in, out int) *Dense { return &Dense{name: name, in: in, out: out} }

func (d *Dense) Name() string    { return d.name }
func (d *Dense) InShape() []int  { return []int{d.in} }
func (d *Dense) OutShape() []int { return []int{d.out} }
func (d *Dense) Clone() Layer    { return NewDense(d.name, d.in, d.out) }
func (d *Dense) Params() []ParamSpec {
	return []ParamSpec{
		{Name: "weight", Shape: []int{d.out, d.in}, FanIn: d.in},
		{Name: "bias", Shape: []int{d.out}},
	}
}

func (d *Dense) Forward(be Backend, p [][]float32, x []float32, n int) []float32 {
	d.x = x
	d.y = grow(d.y, n*d.out)
	be.Gemm(false, true, n, d.out, d.in, 1, x, d.in, p[0], d.in, 0, d.y, d.out)
	be.AddRowVector(d.y, p[1], n, d.out)
	return d.y
}

func (d *Dense) Backward(be Backend, p, g [][]float32, dy []float32, n int) []float32 {
	be.Gemm(true, false, d.out, d.in, n, 1, dy, d.out, d.x, d.in, 1, g[0], d.in)
	be.SumRowsInto(g[1], dy, n, d.out)
	return d.inputGrad(be, p, dy, n)
}

// BackwardTo is Backward handing the weight gradient out a block of rows
// at a time (GradientTo): rows o0…o1 of dW = dyᵀ·x are dy's columns o0…o1
// (a submatrix at dy[o0:] with stride out) times x, formed as Backward
// forms them (added into zeros) and scaled. The input's gradient, the
// only use of W here, is formed first, so emit may update W and b.
func (d *Dense) BackwardTo(be Backend, p [][]float32, dy []float32, n int, scale float32, emit func(off int, v []float32)) []float32 {
	dx := d.inputGrad(be, p, dy, n)
	rows := max(1, gradChunk/d.in)
	for o0 := 0; o0 < d.out; o0 += rows {
		o1 := min(d.out, o0+rows)
		d.gw = grow(d.gw, (o1-o0)*d.in)
		clear(d.gw)
		be.Gemm(true, false, o1-o0, d.in, n, 1, dy[o0:], d.out, d.x, d.in, 1, d.gw, d.in)
		be.Scale(scale, d.gw)
		emit(o0*d.in, d.gw)
	}
	d.gw = grow(d.gw, d.out)
	clear(d.gw)
	be.SumRowsInto(d.gw, dy, n, d.out)
	be.Scale(scale, d.gw)
	emit(d.out*d.in, d.gw)
	return dx
}

// inputGrad is dx = dy·W, the gradient with respect to the layer's input.
func (d *Dense) inputGrad(be Backend, p [][]float32, dy []float32, n int) []float32 {
	d.dx = grow(d.dx, n*d.in)
	be.Gemm(false, false, n, d.in, d.out, 1, dy, d.out, p[0], d.in, 0, d.dx, d.in)
	return d.dx
}

// ReLU is the element-wise max(x, 0).
type ReLU struct {
	name  string
	shape []int
	y, dx []float32
}

// NewReLU returns a ReLU over samples of the given shape.
func NewReLU(name string, shape ...int) *ReLU { return &ReLU{name: name, shape: shape} }

func (r *ReLU) Name() string        { return r.name }
func (r *ReLU) InShape() []int      { return r.shape }
func (r *ReLU) OutShape() []int     { return r.shape }
func (r *ReLU) Params() []ParamSpec { return nil }
func (r *ReLU) Clone() Layer        { return NewReLU(r.name, r.shape...) }

func (r *ReLU) Forward(be Backend, _ [][]float32, x []float32, n int) []float32 {
	r.y = grow(r.y, n*prod(r.shape))
	be.ReLU(r.y, x)
	return r.y
}

func (r *ReLU) Backward(be Backend, _, _ [][]float32, dy []float32, n int) []float32 {
	r.dx = grow(r.dx, n*prod(r.shape))
	be.ReLUBackward(r.dx, dy, r.y)
	return r.dx
}

// Flatten reshapes [C, H, W] samples to vectors; the data is already
// contiguous, so it passes slices through.
type Flatten struct {
	name  string
	shape []int
}

// NewFlatten returns a flatten layer for samples of the given shape.
func NewFlatten(name string, shape ...int) *Flatten { return &Flatten{name: name, shape: shape} }

func (f *Flatten) Name() string        { return f.name }
func (f *Flatten) InShape() []int      { return f.shape }
func (f *Flatten) OutShape() []int     { return []int{prod(f.shape)} }
func (f *Flatten) Params() []ParamSpec { return nil }
func (f *Flatten) Clone() Layer        { return NewFlatten(f.name, f.shape...) }
func (f *Flatten) Forward(_ Backend, _ [][]float32, x []float32, _ int) []float32 {
	return x
}
func (f *Flatten) Backward(_ Backend, _, _ [][]float32, dy []float32, _ int) []float32 {
	return dy
}

// Conv2D is a 2-D convolution over [C, H, W] samples computed as im2col
// followed by one GEMM per sample; weights are [outC, inC, kH, kW].
type Conv2D struct {
	name  string
	g     ConvGeom
	outC  int
	x     []float32
	col   []float32 // im2col of every sample of the last batch
	y, dx []float32
	dcol  []float32
}

// NewConv2D returns a convolution of the input [c, h, w] with outC square
// k×k kernels.
func NewConv2D(name string, c, h, w, outC, k, stride, pad int) (*Conv2D, error) {
	g, err := NewConvGeom(c, h, w, k, k, stride, pad)
	if err != nil {
		return nil, fmt.Errorf("conv %s: %w", name, err)
	}
	if outC <= 0 {
		return nil, fmt.Errorf("conv %s: %w: outC %d", name, ErrShape, outC)
	}
	return &Conv2D{name: name, g: g, outC: outC}, nil
}

func (l *Conv2D) Name() string    { return l.name }
func (l *Conv2D) InShape() []int  { return []int{l.g.C, l.g.H, l.g.W} }
func (l *Conv2D) OutShape() []int { return []int{l.outC, l.g.OutH, l.g.OutW} }
func (l *Conv2D) Clone() Layer    { return &Conv2D{name: l.name, g: l.g, outC: l.outC} }
func (l *Conv2D) Params() []ParamSpec {
	return []ParamSpec{
		{Name: "weight", Shape: []int{l.outC, l.g.C, l.g.KH, l.g.KW}, FanIn: l.g.PatchLen},
		{Name: "bias", Shape: []int{l.outC}},
	}
}

func (l *Conv2D) Forward(be Backend, p [][]float32, x []float32, n int) []float32 {
	g := l.g
	inSize, colSize, outSize := g.C*g.H*g.W, g.PatchLen*g.Cols, l.outC*g.Cols
	l.x = x
	l.col = grow(l.col, n*colSize)
	l.y = grow(l.y, n*outSize)
	for s := 0; s < n; s++ {
		col := l.col[s*colSize : (s+1)*colSize]
		y := l.y[s*outSize : (s+1)*outSize]
		be.Im2Col(col, x[s*inSize:(s+1)*inSize], g)
		be.Gemm(false, false, l.outC, g.Cols, g.PatchLen, 1, p[0], g.PatchLen, col, g.Cols, 0, y, g.Cols)
		be.AddColVector(y, p[1], l.outC, g.Cols)
	}
	return l.y
}

func (l *Conv2D) Backward(be Backend, p, grads [][]float32, dy []float32, n int) []float32 {
	g := l.g
	inSize, colSize, outSize := g.C*g.H*g.W, g.PatchLen*g.Cols, l.outC*g.Cols
	l.dx = grow(l.dx, n*inSize)
	clear(l.dx)
	l.dcol = grow(l.dcol, colSize)
	for s := 0; s < n; s++ {
		col := l.col[s*colSize : (s+1)*colSize]
		d := dy[s*outSize : (s+1)*outSize]
		be.Gemm(false, true, l.outC, g.PatchLen, g.Cols, 1, d, g.Cols, col, g.Cols, 1, grads[0], g.PatchLen)
		be.SumColsInto(grads[1], d, l.outC, g.Cols)
		be.Gemm(true, false, g.PatchLen, g.Cols, l.outC, 1, p[0], g.PatchLen, d, g.Cols, 0, l.dcol, g.Cols)
		be.Col2Im(l.dx[s*inSize:(s+1)*inSize], l.dcol, g)
	}
	return l.dx
}

// MaxPool is a k×k max-pool with the given stride over [C, H, W] samples.
type MaxPool struct {
	name            string
	c, h, w, k, str int
	y, dx           []float32
	argmax          []int32
}

// NewMaxPool returns a max-pool of [c, h, w] samples.
func NewMaxPool(name string, c, h, w, k, stride int) (*MaxPool, error) {
	if c <= 0 || k <= 0 || stride <= 0 || h < k || w < k {
		return nil, fmt.Errorf("maxpool %s: %w: window %d stride %d on %dx%dx%d", name, ErrShape, k, stride, c, h, w)
	}
	return &MaxPool{name: name, c: c, h: h, w: w, k: k, str: stride}, nil
}

func (m *MaxPool) Name() string        { return m.name }
func (m *MaxPool) InShape() []int      { return []int{m.c, m.h, m.w} }
func (m *MaxPool) Params() []ParamSpec { return nil }
func (m *MaxPool) Clone() Layer {
	return &MaxPool{name: m.name, c: m.c, h: m.h, w: m.w, k: m.k, str: m.str}
}
func (m *MaxPool) OutShape() []int {
	return []int{m.c, PoolOut(m.h, m.k, m.str), PoolOut(m.w, m.k, m.str)}
}

func (m *MaxPool) Forward(be Backend, _ [][]float32, x []float32, n int) []float32 {
	out := n * prod(m.OutShape())
	m.y = grow(m.y, out)
	m.argmax = grow(m.argmax, out)
	be.MaxPool(m.y, m.argmax, x, n*m.c, m.h, m.w, m.k, m.str)
	return m.y
}

func (m *MaxPool) Backward(be Backend, _, _ [][]float32, dy []float32, n int) []float32 {
	m.dx = grow(m.dx, n*m.c*m.h*m.w)
	clear(m.dx)
	be.MaxPoolBackward(m.dx, dy, m.argmax)
	return m.dx
}
