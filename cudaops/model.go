package cudaops

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
)

// Range is one named tensor in the flat parameter vector:
// params[Offset : Offset+Size()] holds it row-major, in float32 whatever
// the tensor's own dtype.
type Range struct {
	Name   string // "<layer>.<param>", e.g. "fc1.weight"
	Offset int
	Shape  []int
	// Dtype is the tensor's own dtype in its model, as safetensors names
	// it ("BF16", "I64", ...; DtypeNames lists them); "" is F32, the
	// dtype of every built-in model. A model file holds the tensor in it.
	Dtype string
	// Aliases are the tensor's other names in its model's state: a weight
	// tied to another module's (an LM's output layer sharing its
	// embedding) is one tensor under two names. A model file holds the
	// tensor under each of them.
	Aliases []string
}

// DtypeNames are the dtypes a Range may name, as safetensors names them.
// Integer and bool tensors (a BatchNorm's num_batches_tracked, a mask)
// are carried in float32 and are exact up to 2^24 in magnitude.
var DtypeNames = []string{"F32", "F64", "BF16", "F16", "I64", "I32", "I16", "I8", "U8", "BOOL"}

// DtypeOf is r's dtype, "F32" when it names none.
func (r Range) DtypeOf() string {
	if r.Dtype == "" {
		return "F32"
	}
	return r.Dtype
}

// Size is the number of elements in the range.
func (r Range) Size() int { return prod(r.Shape) }

// End is Offset+Size().
func (r Range) End() int { return r.Offset + r.Size() }

// Layout lists every parameter tensor of a model in flat-vector order; the
// ranges are contiguous and cover [0, total) without gaps.
type Layout []Range

// Total is the length of the flat vector.
func (l Layout) Total() int {
	if len(l) == 0 {
		return 0
	}
	return l[len(l)-1].End()
}

// Overlapping returns the ranges that intersect [lo, hi): the tensors a
// shard holding that slice of the flat vector touches.
func (l Layout) Overlapping(lo, hi int) Layout {
	var out Layout
	for _, r := range l {
		if r.Offset < hi && r.End() > lo {
			out = append(out, r)
		}
	}
	return out
}

// ModelOptions tunes how a Model computes; the zero value is valid.
type ModelOptions struct {
	// Backend runs the kernels; nil means CPU{}.
	Backend Backend
	// Workers is how many goroutines split each mini-batch; 0 means
	// runtime.GOMAXPROCS(0) with gonum's BLAS and 1 with OpenBLAS, which
	// parallelises inside each GEMM.
	Workers int
}

// Validate reports a bad option.
func (o ModelOptions) Validate() error {
	if o.Workers < 0 {
		return fmt.Errorf("cudaops: ModelOptions.Workers %d must be >= 0", o.Workers)
	}
	return nil
}

// Eval is the result of evaluating a model on a dataset.
type Eval struct {
	Samples  int
	Correct  int
	Accuracy float64 // Correct / Samples
	Loss     float64 // mean cross-entropy
}

// minChunk is the smallest per-goroutine share of a mini-batch worth the
// fan-out; below it one goroutine does the whole batch.
const minChunk = 8

// Model is a sequential classifier whose parameters live in one flat vector.
// See the package doc for the layout and concurrency contract.
type Model struct {
	name    string
	in      []int
	classes int
	proto   []Layer
	layout  Layout
	be      Backend

	mu       sync.Mutex
	replicas []*replica
	sum      []float32 // GradientTo's sum of several replicas' gradients, made at its first such call
}

// replica is one goroutine's private copy of the layers and its scratch.
type replica struct {
	layers  []Layer
	pv, gv  [][][]float32 // per-layer param and grad views, rebuilt per call
	grad    []float32     // private gradient sum (unused by replica 0)
	scratch []float32     // GradientTo: a layer's gradient when the layer does not stream it
	probs   []float32
	loss    float64
	ok      int
}

// NewSequential builds a model from layers whose shapes chain; in is the
// per-sample input shape and the last layer must output classes logits.
func NewSequential(name string, in []int, classes int, layers []Layer, opts ModelOptions) (*Model, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if len(layers) == 0 {
		return nil, fmt.Errorf("model %s: %w: no layers", name, ErrShape)
	}
	shape := in
	var layout Layout
	off := 0
	for _, l := range layers {
		if !slices.Equal(l.InShape(), shape) {
			return nil, fmt.Errorf("model %s: %w: layer %s takes %v, gets %v", name, ErrShape, l.Name(), l.InShape(), shape)
		}
		for _, p := range l.Params() {
			layout = append(layout, Range{Name: l.Name() + "." + p.Name, Offset: off, Shape: p.Shape})
			off += p.Size()
		}
		shape = l.OutShape()
	}
	if !slices.Equal(shape, []int{classes}) {
		return nil, fmt.Errorf("model %s: %w: outputs %v, want [%d]", name, ErrShape, shape, classes)
	}
	m := &Model{name: name, in: slices.Clone(in), classes: classes, proto: layers, layout: layout, be: opts.Backend}
	if m.be == nil {
		m.be = CPU{}
	}
	workers := opts.Workers
	if workers == 0 {
		workers = defaultWorkers()
	}
	for range workers {
		r := &replica{}
		for _, l := range layers {
			r.layers = append(r.layers, l.Clone())
		}
		r.pv = make([][][]float32, len(layers))
		r.gv = make([][][]float32, len(layers))
		m.replicas = append(m.replicas, r)
	}
	return m, nil
}

// Name is the registry name of the model.
func (m *Model) Name() string { return m.name }

// InputShape is the per-sample input shape, e.g. [1 28 28].
func (m *Model) InputShape() []int { return slices.Clone(m.in) }

// InputSize is the number of float32 values per input sample.
func (m *Model) InputSize() int { return prod(m.in) }

// Classes is the number of output classes.
func (m *Model) Classes() int { return m.classes }

// NumParams is the length of the flat parameter (and gradient) vector.
func (m *Model) NumParams() int { return m.layout.Total() }

// Layout returns a copy of the flat layout.
func (m *Model) Layout() Layout {
	out := make(Layout, len(m.layout))
	for i, r := range m.layout {
		out[i] = Range{Name: r.Name, Offset: r.Offset, Shape: slices.Clone(r.Shape)}
	}
	return out
}

// Workers is how many goroutines split each mini-batch.
func (m *Model) Workers() int { return len(m.replicas) }

// Backend is the backend the model computes on.
func (m *Model) Backend() Backend { return m.be }

// Init returns a fresh flat parameter vector: He-normal weights
// (std sqrt(2/fanIn)) and zero biases, the same for the same seed.
func (m *Model) Init(seed uint64) []float32 {
	rng := rand.New(rand.NewPCG(seed, 0x64737370))
	params := make([]float32, m.NumParams())
	off := 0
	for _, l := range m.proto {
		for _, p := range l.Params() {
			seg := params[off : off+p.Size()]
			off += p.Size()
			if p.FanIn == 0 {
				continue
			}
			std := math.Sqrt(2 / float64(p.FanIn))
			for i := range seg {
				seg[i] = float32(rng.NormFloat64() * std)
			}
		}
	}
	return params
}

func (m *Model) checkBatch(params, x []float32, labels []int) error {
	if len(params) != m.NumParams() {
		return fmt.Errorf("model %s: %w: %d params, want %d", m.name, ErrShape, len(params), m.NumParams())
	}
	if len(labels) == 0 || len(x) != len(labels)*m.InputSize() {
		return fmt.Errorf("model %s: %w: %d inputs for %d labels of size %d", m.name, ErrShape, len(x), len(labels), m.InputSize())
	}
	for i, y := range labels {
		if y < 0 || y >= m.classes {
			return fmt.Errorf("model %s: %w: label %d at %d outside [0,%d)", m.name, ErrShape, y, i, m.classes)
		}
	}
	return nil
}

// Gradient computes the mean cross-entropy of the mini-batch (x holds
// len(labels) samples back to back) and writes its gradient with respect to
// params into grad (len NumParams; overwritten, not accumulated). It
// reuses the model's scratch memory; see the package doc for concurrency.
func (m *Model) Gradient(params, x []float32, labels []int, grad []float32) (float64, error) {
	if err := m.checkBatch(params, x, labels); err != nil {
		return 0, err
	}
	if len(grad) != len(params) {
		return 0, fmt.Errorf("model %s: %w: grad has %d, want %d", m.name, ErrShape, len(grad), len(params))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gradient(params, x, labels, grad), nil
}

// gradient is Gradient's work, m.mu held.
func (m *Model) gradient(params, x []float32, labels []int, grad []float32) float64 {
	n := len(labels)
	used := m.run(params, x, labels, grad, true)
	for _, r := range used[1:] {
		m.be.Axpy(1, r.grad, grad)
	}
	m.be.Scale(1/float32(n), grad)
	var loss float64
	for _, r := range used {
		loss += r.loss
	}
	return loss / float64(n)
}

// GradientTo is Gradient handing the gradient to emit in pieces as
// backpropagation forms them, instead of writing it into one slice of the
// model's size: emit(off, v) gives values off … off+len(v)−1 of the flat
// gradient (the Layout), every index exactly once, the last layer's
// first; v is the model's scratch, valid only during the call. The values
// are Gradient's. When one goroutine takes the whole batch (Workers 1, or
// a batch under 2·minChunk) no buffer of the model's size is held: a dense
// layer's weight gradient is formed gradChunk values at a time, so a
// worker of a 100 MB model keeps its parameters and its gradient's
// encoding, not a second 100 MB. With several goroutines their gradients
// are summed into a buffer of the model's size, kept for the next call,
// and handed out from it. A piece is handed out only once the call reads
// params[off:off+len(v)] no more, so emit may update them: an optimizer's
// step taken as the gradient forms, without a buffer of the model's size.
func (m *Model) GradientTo(params, x []float32, labels []int, emit func(off int, v []float32)) (float64, error) {
	if err := m.checkBatch(params, x, labels); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	n := len(labels)
	if m.parts(n) > 1 {
		m.sum = grow(m.sum, len(params))
		loss := m.gradient(params, x, labels, m.sum)
		for off := 0; off < len(m.sum); off += gradChunk {
			emit(off, m.sum[off:min(len(m.sum), off+gradChunk)])
		}
		return loss, nil
	}
	r := m.replicas[0]
	m.forward(r, params, x, labels)
	m.backwardTo(r, labels, emit)
	return r.loss / float64(n), nil
}

// gradChunk is how many values of a gradient GradientTo hands out at once
// (1 MiB of scratch a dense layer).
const gradChunk = 1 << 18

// parts is how many replicas share a batch of n samples.
func (m *Model) parts(n int) int { return min(len(m.replicas), max(1, n/minChunk)) }

// run splits the batch across replicas, runs forward (and backward when
// train is set; replica 0 writes into grad0, the rest into their own
// buffers) and returns the replicas used, in batch order.
func (m *Model) run(params, x []float32, labels []int, grad0 []float32, train bool) []*replica {
	n := len(labels)
	parts := m.parts(n)
	chunk := (n + parts - 1) / parts
	used := m.replicas[:(n+chunk-1)/chunk]
	in := m.InputSize()
	var wg sync.WaitGroup
	for i, r := range used {
		lo, hi := i*chunk, min(n, (i+1)*chunk)
		g := grad0
		if train && i > 0 {
			r.grad = grow(r.grad, len(params))
			g = r.grad
		}
		wg.Go(func() {
			m.pass(r, params, x[lo*in:hi*in], labels[lo:hi], g, train)
		})
	}
	wg.Wait()
	return used
}

// pass runs one replica over its share of the batch: forward, loss, and
// when train is set, backward into grad (zeroed first).
func (m *Model) pass(r *replica, params, x []float32, labels []int, grad []float32, train bool) {
	n := len(labels)
	m.forward(r, params, x, labels)
	if !train {
		return
	}
	off := 0
	for i, l := range m.proto {
		r.gv[i] = r.gv[i][:0]
		for _, p := range l.Params() {
			r.gv[i] = append(r.gv[i], grad[off:off+p.Size()])
			off += p.Size()
		}
	}
	clear(grad)
	d := m.lossGradient(r, labels)
	for i := len(r.layers) - 1; i >= 0; i-- {
		d = r.layers[i].Backward(m.be, r.pv[i], r.gv[i], d, n)
	}
}

// forward runs the replica's layers over x and sets its loss, its count
// of correct answers and its probabilities (lossGradient's input).
func (m *Model) forward(r *replica, params, x []float32, labels []int) {
	n := len(labels)
	off := 0
	for i, l := range m.proto {
		r.pv[i] = r.pv[i][:0]
		for _, p := range l.Params() {
			r.pv[i] = append(r.pv[i], params[off:off+p.Size()])
			off += p.Size()
		}
	}
	a := x
	for i, l := range r.layers {
		a = l.Forward(m.be, r.pv[i], a, n)
	}
	r.probs = grow(r.probs, n*m.classes)
	r.loss = m.be.SoftmaxCrossEntropy(r.probs, a, labels, n, m.classes)
	r.ok = 0
	for s, y := range labels {
		if argmax(a[s*m.classes:(s+1)*m.classes]) == y {
			r.ok++
		}
	}
}

// lossGradient is the gradient of the summed loss with respect to the
// logits, written over the replica's probabilities (not needed after).
func (m *Model) lossGradient(r *replica, labels []int) []float32 {
	m.be.SoftmaxCrossEntropyBackward(r.probs, r.probs, labels, len(labels), m.classes)
	return r.probs
}

// streamingLayer is a layer that hands its parameters' gradient out in
// pieces (GradientTo) rather than adding it into one slice a tensor.
type streamingLayer interface {
	// BackwardTo is Backward with the parameters' gradient, times scale,
	// given to emit (off within the layer's parameters, in ParamSpec
	// order), every value once.
	BackwardTo(be Backend, params [][]float32, dy []float32, n int, scale float32, emit func(off int, v []float32)) []float32
}

// backwardTo runs the replica's backward pass after forward, handing the
// mean gradient to emit (GradientTo). A layer that does not stream forms
// its gradient in the replica's scratch, the size of its own parameters.
func (m *Model) backwardTo(r *replica, labels []int, emit func(off int, v []float32)) {
	n := len(labels)
	scale := 1 / float32(n)
	d := m.lossGradient(r, labels)
	end := m.NumParams()
	for i := len(r.layers) - 1; i >= 0; i-- {
		size := 0
		for _, p := range m.proto[i].Params() {
			size += p.Size()
		}
		base := end - size
		end = base
		if sl, ok := r.layers[i].(streamingLayer); ok {
			d = sl.BackwardTo(m.be, r.pv[i], d, n, scale, func(off int, v []float32) { emit(base+off, v) })
			continue
		}
		r.scratch = grow(r.scratch, size)
		clear(r.scratch)
		r.gv[i] = r.gv[i][:0]
		off := 0
		for _, p := range m.proto[i].Params() {
			r.gv[i] = append(r.gv[i], r.scratch[off:off+p.Size()])
			off += p.Size()
		}
		d = r.layers[i].Backward(m.be, r.pv[i], r.gv[i], d, n)
		if size > 0 {
			m.be.Scale(scale, r.scratch)
			emit(base, r.scratch)
		}
	}
}

func argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

// evalBatch is how many samples Evaluate pushes through at once: 256,
// fewer for a model whose widest layer would make a layer's output at 256
// samples larger than evalOutputValues (a 100 MB MLP's 4608-wide layers
// held 19 MB of activations an evaluation; at 56 samples, 4 MB), at least
// 16.
func (m *Model) evalBatch() int {
	widest := m.InputSize()
	for _, l := range m.proto {
		widest = max(widest, prod(l.OutShape()))
	}
	return max(16, min(256, evalOutputValues/widest))
}

// evalOutputValues bounds one layer's output in an evaluation's batch.
const evalOutputValues = 1 << 18

// Evaluate returns the accuracy and mean loss of params on every sample of
// ds. It takes the model's lock like Gradient.
func (m *Model) Evaluate(params []float32, ds Dataset) (Eval, error) {
	if !slices.Equal(ds.Shape(), m.in) {
		return Eval{}, fmt.Errorf("model %s: %w: dataset samples are %v, model takes %v", m.name, ErrShape, ds.Shape(), m.in)
	}
	if len(params) != m.NumParams() {
		return Eval{}, fmt.Errorf("model %s: %w: %d params, want %d", m.name, ErrShape, len(params), m.NumParams())
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	in, batch := m.InputSize(), m.evalBatch()
	x := make([]float32, batch*in)
	labels := make([]int, batch)
	var ev Eval
	for lo := 0; lo < ds.Len(); lo += batch {
		hi := min(ds.Len(), lo+batch)
		for i := lo; i < hi; i++ {
			y := ds.Sample(i, x[(i-lo)*in:(i-lo+1)*in])
			if y < 0 || y >= m.classes {
				return Eval{}, fmt.Errorf("model %s: %w: label %d of sample %d outside [0,%d)", m.name, ErrShape, y, i, m.classes)
			}
			labels[i-lo] = y
		}
		for _, r := range m.run(params, x[:(hi-lo)*in], labels[:hi-lo], nil, false) {
			ev.Loss += r.loss
			ev.Correct += r.ok
		}
		ev.Samples += hi - lo
	}
	if ev.Samples > 0 {
		ev.Accuracy = float64(ev.Correct) / float64(ev.Samples)
		ev.Loss /= float64(ev.Samples)
	}
	return ev, nil
}
