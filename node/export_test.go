package node

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"dsspmesh/mesh"
	"dsspmesh/node/records"
	"dsspmesh/shardapi"
)

// SetEvalLendBytes sets the model size from which an evaluation borrows
// the worker's θ (lend.go) for the external tests, and returns the undo.
func SetEvalLendBytes(n int) (restore func()) {
	old := evalLendBytes
	evalLendBytes = n
	return func() { evalLendBytes = old }
}

// PushWorker is a worker with only its push path, for the external tests
// that drive it against real shard replicas: fp32 gradients, bounds[s]
// the parameters of shard s.
type PushWorker struct{ w *worker }

// NewPushWorker returns a worker named id pushing through clients.
func NewPushWorker(log *slog.Logger, id mesh.NodeID, tr mesh.Transport, spec JobSpec, bounds [][2]int, clients []*shardapi.Client) *PushWorker {
	w := &worker{n: &Node{log: log, id: id, tr: tr, obs: records.NoObserver{}, metrics: NewMetrics(func() Status { return Status{} }),
		events: newEventLog(time.Now)}, spec: spec, bounds: bounds, theta: make([]float32, bounds[len(bounds)-1][1]),
		iters: make([]int64, len(bounds)), reads: make([]SliceRead, len(bounds)), clients: clients}
	return &PushWorker{w: w}
}

// Encode encodes each shard's slice of g (one value for every parameter).
func (p *PushWorker) Encode(g []float32) ([][]byte, error) {
	encs := p.w.newEncoders()
	out := make([][]byte, len(encs))
	for s, e := range encs {
		b := p.w.bounds[s]
		e.Start(nil)
		e.Put(0, g[b[0]:b[1]])
		var err error
		if out[s], err = e.Finish(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// PushAll runs one pushAll of iteration iter (one sample) and returns the
// worker's clock on each shard after it, and for each shard whether a
// slice came back and whether its read is unchecked.
func (p *PushWorker) PushAll(ctx context.Context, iter int64, grad [][]byte) (iters []int64, got, unchecked []bool, err error) {
	fl := p.w.newFlight(iter, make([]float32, len(p.w.theta)))
	fl.batch = 1
	err = p.w.pushAll(ctx, fl, grad)
	unchecked = make([]bool, len(fl.reads))
	for s, r := range fl.reads {
		unchecked[s] = r.Unchecked
	}
	return slices.Clone(p.w.iters), fl.got, unchecked, err
}

// Align runs align after a push that left the shards apart and returns
// the worker's clocks.
func (p *PushWorker) Align(ctx context.Context) ([]int64, error) {
	err := p.w.align(ctx, false)
	return slices.Clone(p.w.iters), err
}
