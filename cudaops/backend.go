package cudaops

import (
	"errors"
	"fmt"
	"sort"
	"sync"
)

// Sentinel errors of the package.
var (
	ErrUnknownModel   = errors.New("cudaops: unknown model")
	ErrUnknownBackend = errors.New("cudaops: unknown backend")
	ErrShape          = errors.New("cudaops: shape mismatch")
	ErrNoMNIST        = errors.New("cudaops: MNIST files not found")
)

// ConvGeom describes one 2-D convolution (or the patch extraction behind
// it) over a single sample stored as [C, H, W].
type ConvGeom struct {
	C, H, W        int // input channels, height, width
	KH, KW         int // kernel height and width
	Stride, Pad    int
	OutH, OutW     int // derived by NewConvGeom
	PatchLen, Cols int // C*KH*KW and OutH*OutW: the im2col matrix is [PatchLen, Cols]
}

// NewConvGeom fills the derived fields and checks the geometry.
func NewConvGeom(c, h, w, kh, kw, stride, pad int) (ConvGeom, error) {
	g := ConvGeom{C: c, H: h, W: w, KH: kh, KW: kw, Stride: stride, Pad: pad}
	if c <= 0 || h <= 0 || w <= 0 || kh <= 0 || kw <= 0 || stride <= 0 || pad < 0 {
		return g, fmt.Errorf("%w: bad conv geometry %+v", ErrShape, g)
	}
	g.OutH = (h+2*pad-kh)/stride + 1
	g.OutW = (w+2*pad-kw)/stride + 1
	if g.OutH <= 0 || g.OutW <= 0 {
		return g, fmt.Errorf("%w: kernel %dx%d larger than padded input %dx%d", ErrShape, kh, kw, h+2*pad, w+2*pad)
	}
	g.PatchLen = c * kh * kw
	g.Cols = g.OutH * g.OutW
	return g, nil
}

// Backend is the set of kernels training needs. All matrices are row-major.
// Slices are caller-owned and not retained. A Backend value may be shared by
// goroutines as long as they write disjoint slices.
type Backend interface {
	Name() string

	// Gemm computes C = alpha*op(A)*op(B) + beta*C where op(A) is m×k and
	// op(B) is k×n; transA/transB select the transpose.
	Gemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int)

	// AddRowVector adds v (len cols) to every row of the rows×cols matrix x.
	AddRowVector(x, v []float32, rows, cols int)
	// SumRowsInto adds the column sums of the rows×cols matrix x into dst.
	SumRowsInto(dst, x []float32, rows, cols int)
	// AddColVector adds v[r] to every element of row r of the rows×cols x.
	AddColVector(x, v []float32, rows, cols int)
	// SumColsInto adds the row sums of the rows×cols matrix x into dst.
	SumColsInto(dst, x []float32, rows, cols int)

	// ReLU sets y = max(x, 0).
	ReLU(y, x []float32)
	// ReLUBackward sets dx = dy where y > 0, else 0.
	ReLUBackward(dx, dy, y []float32)
	// Axpy sets y += alpha*x.
	Axpy(alpha float32, x, y []float32)
	// Scale sets x *= alpha.
	Scale(alpha float32, x []float32)

	// SoftmaxCrossEntropy writes the softmax of each row of the rows×cols
	// logits into probs and returns the summed (not averaged) cross-entropy
	// against labels.
	SoftmaxCrossEntropy(probs, logits []float32, labels []int, rows, cols int) float64
	// SoftmaxCrossEntropyBackward sets dlogits = probs - onehot(labels): the
	// gradient of the summed loss.
	SoftmaxCrossEntropyBackward(dlogits, probs []float32, labels []int, rows, cols int)

	// Im2Col writes the [PatchLen, Cols] patch matrix of one sample x.
	Im2Col(col, x []float32, g ConvGeom)
	// Col2Im adds the patch matrix col back into one sample dx (the adjoint
	// of Im2Col).
	Col2Im(dx, col []float32, g ConvGeom)

	// MaxPool pools each of n*c planes of h×w with a k×k window and the given
	// stride, writing the flat input index of each maximum into argmax.
	MaxPool(y []float32, argmax []int32, x []float32, planes, h, w, k, stride int)
	// MaxPoolBackward adds dy into dx at the recorded argmax positions; dx
	// must be zeroed by the caller.
	MaxPoolBackward(dx, dy []float32, argmax []int32)

	// SGDStep applies one SGD-with-momentum step on flat slices:
	// v = momentum*v + g + weightDecay*p; p -= lr*v.
	SGDStep(params, grad, velocity []float32, lr, momentum, weightDecay float32)
}

var backends = struct {
	sync.Mutex
	m map[string]func() (Backend, error)
}{m: map[string]func() (Backend, error){
	"cpu": func() (Backend, error) { return CPU{}, nil },
}}

// RegisterBackend makes a backend constructor available to [NewBackend]
// under name. The cuda subpackage calls it from init when built with the
// cuda tag. Registering a name twice replaces the earlier constructor.
func RegisterBackend(name string, ctor func() (Backend, error)) {
	backends.Lock()
	defer backends.Unlock()
	backends.m[name] = ctor
}

// BackendNames lists the registered backends, sorted.
func BackendNames() []string {
	backends.Lock()
	defer backends.Unlock()
	names := make([]string, 0, len(backends.m))
	for n := range backends.m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// NewBackend returns the backend registered under name ("cpu" always
// exists; "cuda" only in binaries built with the cuda tag).
func NewBackend(name string) (Backend, error) {
	backends.Lock()
	ctor, ok := backends.m[name]
	backends.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w %q (known: %v)", ErrUnknownBackend, name, BackendNames())
	}
	b, err := ctor()
	if err != nil {
		return nil, fmt.Errorf("cudaops: start backend %q: %w", name, err)
	}
	return b, nil
}
