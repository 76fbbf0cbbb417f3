package worker

import (
	"context"
	"hash/fnv"

	"dsspmesh/cudaops"
	"dsspmesh/mesh"
)

// Compute is a worker's gradient computation: what the loop asks of the
// model and its data, and nothing of how. The loop, its gates, the
// pipeline and the balance layer run the same whichever implementation
// computes. Calls come from the loop goroutine only, one at a time.
type Compute interface {
	// NumParams is the length of θ and of the gradient.
	NumParams() int
	// Next loads the next mini-batch of n samples: from position pos of
	// the job-wide data order (pos ≥ 0: the balance layer's assignment),
	// or with pos < 0 the next batch of the compute's own reading.
	Next(n int, pos int64) error
	// Gradient computes on theta the mean gradient of samples [lo, hi) of
	// the batch loaded, handing it to emit in pieces as it forms (off into
	// the flat vector; v may be modified and is valid only during the
	// call), and returns their mean loss. theta is read only. ctx bounds
	// waiting, not the computation.
	Gradient(ctx context.Context, theta []float32, lo, hi int, emit func(off int, v []float32)) (float64, error)
}

// ThetaHolder is implemented by a Compute that holds θ where it computes
// on it, such as an external trainer's shared memory (node/trainer): the
// worker then keeps its θ in Theta() instead of a slice of its own, so
// Gradient is handed that very slice and needs no copy. The worker writes
// θ only between Gradient calls. A Compute that wraps another ([Emulate])
// reaches the wrapped one's through an Unwrap() Compute method.
type ThetaHolder interface {
	Theta() []float32
}

// thetaOf is c's ThetaHolder.Theta, through any wrappers; nil when none
// holds θ.
func thetaOf(c Compute) []float32 {
	for c != nil {
		if h, ok := c.(ThetaHolder); ok {
			return h.Theta()
		}
		u, ok := c.(interface{ Unwrap() Compute })
		if !ok {
			return nil
		}
		c = u.Unwrap()
	}
	return nil
}

// ModelCompute is [Compute] over a built-in Go model (cudaops) and the
// job's training set.
type ModelCompute struct {
	model  *cudaops.Model
	train  cudaops.Dataset
	loader *cudaops.Loader // the worker's own reading, without the balance layer
	order  *cudaops.Order  // the job-wide data order, under the balance layer
	own    int64           // next position of its own reading under the balance layer
	x      []float32
	labels []int
}

// NewModelCompute computes with model on train for worker id. Each worker
// shuffles the whole training set with its own seed (seed ^ a hash of
// id): the partition does not depend on how many workers there are, which
// changes as nodes join and die, and a restarted worker replays its own
// sequence. Under the balance layer (balance) the batches come from the
// job-wide order of seed, and without an assignment from a position of
// the worker's own.
func NewModelCompute(model *cudaops.Model, train cudaops.Dataset, id mesh.NodeID, batch int, seed uint64, balance bool) (*ModelCompute, error) {
	h := fnv.New64a()
	h.Write([]byte(id))
	loader, err := cudaops.NewLoader(train, cudaops.LoaderConfig{Worker: 0, Workers: 1, BatchSize: batch, Seed: seed ^ h.Sum64()})
	if err != nil {
		return nil, err
	}
	c := &ModelCompute{model: model, train: train, loader: loader,
		x: make([]float32, batch*model.InputSize()), labels: make([]int, batch)}
	if balance {
		if c.order, err = cudaops.NewOrder(train.Len(), seed); err != nil {
			return nil, err
		}
		c.own = int64(h.Sum64() % uint64(train.Len()))
	}
	return c, nil
}

// NumParams implements [Compute].
func (c *ModelCompute) NumParams() int { return c.model.NumParams() }

// Next implements [Compute]. Without the balance layer the batch is the
// loader's next (n is the job's batch).
func (c *ModelCompute) Next(n int, pos int64) error {
	if c.order == nil {
		c.loader.Next(c.x, c.labels)
		return nil
	}
	if pos < 0 {
		pos = c.own
		c.own += int64(n)
	}
	in := c.model.InputSize()
	if cap(c.labels) < n {
		c.x, c.labels = make([]float32, n*in), make([]int, n)
	}
	c.x, c.labels = c.x[:n*in], c.labels[:n]
	c.order.Fill(c.train, pos, c.x, c.labels)
	return nil
}

// Gradient implements [Compute] with cudaops.Model.GradientTo.
func (c *ModelCompute) Gradient(_ context.Context, theta []float32, lo, hi int, emit func(off int, v []float32)) (float64, error) {
	in := c.model.InputSize()
	return c.model.GradientTo(theta, c.x[lo*in:hi*in], c.labels[lo:hi], emit)
}
