package worker

import (
	"context"
	"fmt"
	"hash/fnv"

	"dsspmesh/cudaops"
	"dsspmesh/mesh"
)

// Compute is a worker's gradient computation: what the loop asks of the
// model and its data, and nothing of how. The loop, its gates, the
// pipeline and the balance layer run the same whichever implementation
// computes. Calls come from the loop goroutine only, one at a time.
//
// One call of Next and one of Gradient (two under --pipeline's split:
// samples [0, a) on the θ before the push in flight lands, [a, n) on the θ
// it brought) make one push. In a job of local rounds (--local-steps H > 1,
// docs/design.md "Local rounds") that push is a round: h local steps of
// the compute's own inner optimizer, and what Gradient hands over is the
// round's pseudo-gradient θ_start − θ_local, not a gradient. h = 1 always
// means a gradient: a job without local rounds asks for nothing else, and
// one with them never asks for a round of fewer than 2 steps. The
// built-in models take rounds through [LocalRounds]; an external trainer
// runs its own inner loop (the trainer protocol's local_steps).
type Compute interface {
	// NumParams is the length of θ and of the gradient.
	NumParams() int
	// Next loads the next round: n samples in h ≥ 1 local steps, step k
	// on the round's samples [k·n/h, (k+1)·n/h) (integer division: the
	// steps' batches differ by at most one sample; without the balance
	// layer n is the job's batch × h, so every step has the job's batch).
	// The round is samples [pos, pos+n) of the job-wide data order (pos ≥
	// 0: the balance layer's assignment), or with pos < 0 the next n
	// samples of the compute's own reading. h = 1 is one mini-batch of n
	// samples, the only round of a job without local rounds.
	Next(n, h int, pos int64) error
	// Gradient computes on theta, for h = 1, the mean gradient of samples
	// [lo, hi) of the batch loaded; for h > 1, the round's pseudo-gradient
	// theta − θ_h after h steps of the inner optimizer from theta (lo = 0,
	// hi = n). A round is split only at a step boundary ([Boundary]), once:
	// [0, a) runs the first steps from the θ given and hands over their
	// pseudo-gradient Δ_a; [a, n) carries Δ_a onto the θ given then (the
	// remaining steps start from theta − Δ_a) and hands over the whole
	// round's theta − θ_h, which the loop takes alone. It hands the result to emit in
	// pieces as it forms (off into the flat vector; v may be modified and
	// is valid only during the call) and returns the mean loss of the
	// samples computed (over the round's steps). theta is read only. ctx
	// bounds waiting, not the computation.
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

// InPlace is implemented by a Compute whose Gradient hands each piece to
// emit only once it reads theta at the piece's offsets no more, so that
// emit may update them ([ModelCompute], by cudaops.Model.GradientTo's
// contract). [LocalRounds] then steps its local copy piece by piece, with
// no gradient buffer of the model's size. A Compute that wraps another
// ([Emulate]) reaches the wrapped one's through Unwrap.
type InPlace interface {
	InPlace() bool
}

// inPlace reports whether c, through any wrappers, is [InPlace].
func inPlace(c Compute) bool {
	p, ok := unwrapTo[InPlace](c)
	return ok && p.InPlace()
}

// thetaOf is c's ThetaHolder.Theta, through any wrappers; nil when none
// holds θ.
func thetaOf(c Compute) []float32 {
	if h, ok := unwrapTo[ThetaHolder](c); ok {
		return h.Theta()
	}
	return nil
}

// unwrapTo is the first of c and the Computes it wraps (through an
// Unwrap() Compute method) that is a T.
func unwrapTo[T any](c Compute) (T, bool) {
	for c != nil {
		if t, ok := c.(T); ok {
			return t, true
		}
		u, ok := c.(interface{ Unwrap() Compute })
		if !ok {
			break
		}
		c = u.Unwrap()
	}
	var zero T
	return zero, false
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

// Next implements [Compute] for h = 1: ModelCompute computes gradients,
// and [LocalRounds] takes a round's steps over it. Without the balance
// layer the batch is the loader's next (n is the job's batch).
func (c *ModelCompute) Next(n, h int, pos int64) error {
	if h != 1 {
		return fmt.Errorf("worker: ModelCompute computes gradients, not a round of %d local steps (wrap it in LocalRounds)", h)
	}
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

// InPlace implements [InPlace]: cudaops.Model.GradientTo hands a piece
// out once it has read the parameters the piece covers.
func (c *ModelCompute) InPlace() bool { return true }

// Gradient implements [Compute] with cudaops.Model.GradientTo.
func (c *ModelCompute) Gradient(_ context.Context, theta []float32, lo, hi int, emit func(off int, v []float32)) (float64, error) {
	in := c.model.InputSize()
	return c.model.GradientTo(theta, c.x[lo*in:hi*in], c.labels[lo:hi], emit)
}

// StartLoss is implemented by a Compute that can measure the loss of θ₀
// when its gradients report none (an external trainer whose loop gives
// step() no loss: it evaluates θ₀ on its test set). ok is false when it
// cannot say.
type StartLoss interface {
	StartLoss(ctx context.Context, theta []float32) (loss float64, ok bool)
}
