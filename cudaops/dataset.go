package cudaops

import (
	"fmt"
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
type Memory struct {
	X       []float32 // Len()*prod(shape) values, sample after sample
	Y       []int
	shape   []int
	classes int
}

// NewMemory wraps x and y (not copied) as a dataset.
func NewMemory(x []float32, y []int, shape []int, classes int) (*Memory, error) {
	size := prod(shape)
	if size <= 0 || len(x) != len(y)*size {
		return nil, fmt.Errorf("%w: %d values for %d samples of %v", ErrShape, len(x), len(y), shape)
	}
	for i, l := range y {
		if l < 0 || l >= classes {
			return nil, fmt.Errorf("%w: label %d of sample %d outside [0,%d)", ErrShape, l, i, classes)
		}
	}
	return &Memory{X: x, Y: y, shape: slices.Clone(shape), classes: classes}, nil
}

func (m *Memory) Len() int     { return len(m.Y) }
func (m *Memory) Shape() []int { return slices.Clone(m.shape) }
func (m *Memory) Classes() int { return m.classes }
func (m *Memory) Sample(i int, x []float32) int {
	size := prod(m.shape)
	copy(x[:size], m.X[i*size:(i+1)*size])
	return m.Y[i]
}

// Subset returns the first n samples (all if n >= Len) as a dataset sharing
// memory with m.
func (m *Memory) Subset(n int) *Memory {
	n = min(n, m.Len())
	size := prod(m.shape)
	return &Memory{X: m.X[:n*size], Y: m.Y[:n], shape: m.shape, classes: m.classes}
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

// NewSynthetic generates the dataset; the same config gives the same data.
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
	x := make([]float32, c.Samples*size)
	y := make([]int, c.Samples)
	for s := range y {
		y[s] = rng.IntN(c.Classes)
		mean := means[y[s]*size : (y[s]+1)*size]
		for j, mu := range mean {
			x[s*size+j] = mu + float32(rng.NormFloat64()*c.Noise)
		}
	}
	return NewMemory(x, y, c.Shape, c.Classes)
}
