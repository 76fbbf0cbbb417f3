package cudaops

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Dataset is a labelled set of samples addressed by index. Implementations
// must allow concurrent Sample calls.
type Dataset interface {
	// Len is the number of samples.
	Len() int
	// Shape is the per-sample shape, e.g. [1 28 28] or [3 32 32].
	Shape() []int
	// Classes is the number of labels; labels are in [0, Classes).
	Classes() int
	// Sample writes sample i (prod(Shape) values) into x and returns its label.
	Sample(i int, x []float32) int
}

// Memory is a dataset held in memory; it is what the loaders return.
//
// Image sets (MNIST, CIFAR-10) keep their pixels as the file's bytes, one
// byte a value, and convert a sample to float32 only when it is read:
// value = float32(b) / 255, the same float the loaders stored before
// (a quarter of the memory: MNIST's training set is 47 MB, not 188 MB).
// Synthetic sets keep bytes too, each standing for a point of a grid of
// sixteenths (synthStep); NewMemory wraps float32 values. Labels are bytes.
type Memory struct {
	x       []float32     // float values, sample after sample; nil for a byte set
	b       []byte        // byte values, sample after sample; nil for a float set
	table   *[256]float32 // the float each byte stands for: byteScale, or synthScale
	y       []uint8
	shape   []int
	size    int // prod(shape)
	classes int
}

// byteScale[b] is float32(b) / 255, the value a pixel byte stands for.
var byteScale = func() (t [256]float32) {
	for i := range t {
		t[i] = float32(i) / 255
	}
	return t
}()

// NewMemory wraps x and y (not copied) as a dataset of float values.
func NewMemory(x []float32, y []int, shape []int, classes int) (*Memory, error) {
	m, err := newMemory(len(x), y, shape, classes)
	if err != nil {
		return nil, err
	}
	m.x = x
	return m, nil
}

// NewBytes wraps b (not copied) as a dataset whose value j of sample i is
// float32(b[i*size+j]) / 255, size being prod(shape); labels are copied.
func NewBytes(b []byte, y []int, shape []int, classes int) (*Memory, error) {
	m, err := newMemory(len(b), y, shape, classes)
	if err != nil {
		return nil, err
	}
	m.b, m.table = b, &byteScale
	return m, nil
}

func newMemory(values int, y []int, shape []int, classes int) (*Memory, error) {
	size := prod(shape)
	if size <= 0 || values != len(y)*size {
		return nil, fmt.Errorf("%w: %d values for %d samples of %v", ErrShape, values, len(y), shape)
	}
	if classes < 1 || classes > 256 {
		return nil, fmt.Errorf("%w: %d classes outside [1,256]", ErrShape, classes)
	}
	labels := make([]uint8, len(y))
	for i, l := range y {
		if l < 0 || l >= classes {
			return nil, fmt.Errorf("%w: label %d of sample %d outside [0,%d)", ErrShape, l, i, classes)
		}
		labels[i] = uint8(l)
	}
	return &Memory{y: labels, shape: slices.Clone(shape), size: size, classes: classes}, nil
}

func (m *Memory) Len() int     { return len(m.y) }
func (m *Memory) Shape() []int { return slices.Clone(m.shape) }
func (m *Memory) Classes() int { return m.classes }
func (m *Memory) Sample(i int, x []float32) int {
	lo, hi := i*m.size, (i+1)*m.size
	if m.b == nil {
		copy(x[:m.size], m.x[lo:hi])
		return int(m.y[i])
	}
	x = x[:m.size]
	t := m.table
	for j, v := range m.b[lo:hi] {
		x[j] = t[v]
	}
	return int(m.y[i])
}

// Bytes is the memory the samples and labels take.
func (m *Memory) Bytes() int { return 4*len(m.x) + len(m.b) + len(m.y) }

// Subset returns the first n samples (all if n >= Len) as a dataset sharing
// memory with m.
func (m *Memory) Subset(n int) *Memory {
	return m.slice(0, min(n, m.Len()))
}

// slice returns samples [lo, hi) as a dataset sharing memory with m.
func (m *Memory) slice(lo, hi int) *Memory {
	s := *m
	if m.b == nil {
		s.x = m.x[lo*m.size : hi*m.size]
	} else {
		s.b = m.b[lo*m.size : hi*m.size]
	}
	s.y = m.y[lo:hi]
	return &s
}

// SyntheticConfig describes a seeded, learnable synthetic dataset: each
// class has a random mean pattern and samples are that mean plus Gaussian
// noise.
type SyntheticConfig struct {
	Samples int
	Shape   []int
	Classes int
	Noise   float64 // standard deviation of the per-value noise
	Seed    uint64
}

// DefaultSyntheticConfig is a small MNIST-shaped set.
func DefaultSyntheticConfig() SyntheticConfig {
	return SyntheticConfig{Samples: 512, Shape: []int{1, 28, 28}, Classes: 10, Noise: 1, Seed: 1}
}

// Validate names the first bad field.
func (c SyntheticConfig) Validate() error {
	switch {
	case c.Samples <= 0:
		return fmt.Errorf("cudaops: SyntheticConfig.Samples %d must be > 0", c.Samples)
	case len(c.Shape) == 0 || prod(c.Shape) <= 0:
		return fmt.Errorf("cudaops: SyntheticConfig.Shape %v must be non-empty and positive", c.Shape)
	case c.Classes < 2:
		return fmt.Errorf("cudaops: SyntheticConfig.Classes %d must be >= 2", c.Classes)
	case c.Noise < 0:
		return fmt.Errorf("cudaops: SyntheticConfig.Noise %g must be >= 0", c.Noise)
	}
	return nil
}

// synthStep is the spacing of the values a synthetic set's bytes stand
// for: byte v is (v − 128)·synthStep, from −8 to 7.94. A class mean is a
// standard normal plus noise of standard deviation Noise (1 by default), so
// rounding to the grid moves a value by at most 1/32 of a standard
// deviation, and a set of 12 000 MNIST-shaped samples takes 9.4 MB instead
// of 37.6 MB in float32 on every node.
const synthStep = 1.0 / 16

// synthScale[v] is the value synthetic byte v stands for.
var synthScale = func() (t [256]float32) {
	for i := range t {
		t[i] = float32(i-128) * synthStep
	}
	return t
}()

// synthByte rounds x to the nearest value of the grid, clamped to it.
func synthByte(x float64) byte {
	return byte(max(0, min(255, math.Round(x/synthStep)+128)))
}

// NewSynthetic generates the dataset; the same config gives the same data.
// Values are held as bytes on the grid of synthStep (synthScale).
func NewSynthetic(c SyntheticConfig) (*Memory, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(c.Seed, 0x73796e))
	size := prod(c.Shape)
	means := make([]float32, c.Classes*size)
	for i := range means {
		means[i] = float32(rng.NormFloat64())
	}
	b := make([]byte, c.Samples*size)
	y := make([]int, c.Samples)
	for s := range y {
		y[s] = rng.IntN(c.Classes)
		mean := means[y[s]*size : (y[s]+1)*size]
		for j, mu := range mean {
			b[s*size+j] = synthByte(float64(mu + float32(rng.NormFloat64()*c.Noise)))
		}
	}
	m, err := newMemory(len(b), y, c.Shape, c.Classes)
	if err != nil {
		return nil, err
	}
	m.b, m.table = b, &synthScale
	return m, nil
}
