package cudaops

import (
	"fmt"
	"sort"
)

// The registered architectures. Each comment gives the forward order, which
// is also the order of their ranges in the flat layout.
var models = map[string]func(opts ModelOptions) (*Model, error){
	// mlp: 784 → fc1 256 → ReLU → fc2 128 → ReLU → fc3 10, on [1 28 28].
	"mlp": newMLP,
	// mlp-wide: 784 → fc1 4608 → ReLU → fc2 4608 → ReLU → fc3 10, on
	// [1 28 28]: 24.9M parameters, 99.6 MB of float32, the ~100 MB model
	// the mesh's memory and disk bounds are measured with (dssp-lab bench
	// bigmodel, on synthetic-mnist).
	"mlp-wide": newMLPWide,
	// lenet: LeNet-5 with ReLU and max-pool, on [1 28 28]:
	// conv1 6@5×5 pad 2 → ReLU → pool 2 → conv2 16@5×5 → ReLU → pool 2 →
	// fc1 120 → ReLU → fc2 84 → ReLU → fc3 10.
	"lenet": newLeNet,
	// alexnet-small: the paper's downsized AlexNet, on [3 32 32]:
	// conv1 32@5×5 pad 2 → ReLU → pool 2 → conv2 32@5×5 pad 2 → ReLU → pool 2
	// → conv3 64@5×5 pad 2 → ReLU → pool 2 → fc1 64 → ReLU → fc2 10.
	"alexnet-small": newAlexNetSmall,
}

// ModelNames lists the registered model names, sorted.
func ModelNames() []string {
	names := make([]string, 0, len(models))
	for n := range models {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// NewModel builds the registered model called name.
func NewModel(name string, opts ModelOptions) (*Model, error) {
	ctor, ok := models[name]
	if !ok {
		return nil, fmt.Errorf("%w %q (known: %v)", ErrUnknownModel, name, ModelNames())
	}
	return ctor(opts)
}

func newMLP(opts ModelOptions) (*Model, error) {
	return NewSequential("mlp", []int{1, 28, 28}, 10, []Layer{
		NewFlatten("flatten", 1, 28, 28),
		NewDense("fc1", 784, 256), NewReLU("relu1", 256),
		NewDense("fc2", 256, 128), NewReLU("relu2", 128),
		NewDense("fc3", 128, 10),
	}, opts)
}

func newMLPWide(opts ModelOptions) (*Model, error) {
	const w = 4608
	return NewSequential("mlp-wide", []int{1, 28, 28}, 10, []Layer{
		NewFlatten("flatten", 1, 28, 28),
		NewDense("fc1", 784, w), NewReLU("relu1", w),
		NewDense("fc2", w, w), NewReLU("relu2", w),
		NewDense("fc3", w, 10),
	}, opts)
}

// cnnBuilder chains conv/pool layers, tracking the current shape and the
// first error so model constructors read as a list.
type cnnBuilder struct {
	c, h, w int
	layers  []Layer
	err     error
}

func (b *cnnBuilder) conv(name string, outC, k, pad int) {
	if b.err != nil {
		return
	}
	l, err := NewConv2D(name, b.c, b.h, b.w, outC, k, 1, pad)
	if err != nil {
		b.err = err
		return
	}
	o := l.OutShape()
	b.layers = append(b.layers, l, NewReLU("relu_"+name, o...))
	b.c, b.h, b.w = o[0], o[1], o[2]
}

func (b *cnnBuilder) pool(name string, k int) {
	if b.err != nil {
		return
	}
	l, err := NewMaxPool(name, b.c, b.h, b.w, k, k)
	if err != nil {
		b.err = err
		return
	}
	o := l.OutShape()
	b.layers = append(b.layers, l)
	b.c, b.h, b.w = o[0], o[1], o[2]
}

// dense appends fully connected layers of the given widths after a
// flatten, with ReLU between them but not after the last.
func (b *cnnBuilder) dense(widths ...int) {
	if b.err != nil {
		return
	}
	b.layers = append(b.layers, NewFlatten("flatten", b.c, b.h, b.w))
	in := b.c * b.h * b.w
	for i, w := range widths {
		name := fmt.Sprintf("fc%d", i+1)
		b.layers = append(b.layers, NewDense(name, in, w))
		if i < len(widths)-1 {
			b.layers = append(b.layers, NewReLU("relu_"+name, w))
		}
		in = w
	}
}

func newLeNet(opts ModelOptions) (*Model, error) {
	b := &cnnBuilder{c: 1, h: 28, w: 28}
	b.conv("conv1", 6, 5, 2)
	b.pool("pool1", 2)
	b.conv("conv2", 16, 5, 0)
	b.pool("pool2", 2)
	b.dense(120, 84, 10)
	if b.err != nil {
		return nil, b.err
	}
	return NewSequential("lenet", []int{1, 28, 28}, 10, b.layers, opts)
}

func newAlexNetSmall(opts ModelOptions) (*Model, error) {
	b := &cnnBuilder{c: 3, h: 32, w: 32}
	b.conv("conv1", 32, 5, 2)
	b.pool("pool1", 2)
	b.conv("conv2", 32, 5, 2)
	b.pool("pool2", 2)
	b.conv("conv3", 64, 5, 2)
	b.pool("pool3", 2)
	b.dense(64, 10)
	if b.err != nil {
		return nil, b.err
	}
	return NewSequential("alexnet-small", []int{3, 32, 32}, 10, b.layers, opts)
}
