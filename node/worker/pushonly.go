package worker

import (
	"context"
	"log/slog"
	"slices"

	"dsspmesh/mesh"
	"dsspmesh/node/records"
	"dsspmesh/shardapi"

	"github.com/prometheus/client_golang/prometheus"
)

// PushOnly is a worker with only its push path, for tests that drive it
// against real shard replicas (node's re-add test): bounds[s] the
// parameters of shard s, gradients in prec.
type PushOnly struct{ w *Worker }

// NewPushOnly is a worker named id pushing through clients.
func NewPushOnly(log *slog.Logger, id mesh.NodeID, prec shardapi.Precision, bounds [][2]int, clients []*shardapi.Client) *PushOnly {
	counter := func() prometheus.Counter { return prometheus.NewCounter(prometheus.CounterOpts{Name: "c"}) }
	hist := func() prometheus.Histogram { return prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h"}) }
	d := Deps{ID: id, Logger: log, Event: func(records.Event) {},
		Metrics: Metrics{Iterations: counter(), Samples: counter(), ComputeSec: counter(), WaitSec: counter(), Retries: counter(),
			Refused: counter(), PushSeconds: hist(), GateHoldSeconds: hist()}}
	w := newWorker(d, Config{Bounds: bounds, Precision: prec}, ShardClients(clients))
	w.theta = make([]float32, bounds[len(bounds)-1][1])
	return &PushOnly{w: w}
}

// Encode encodes each shard's slice of g (one value for every parameter).
func (p *PushOnly) Encode(g []float32) ([][]byte, error) {
	encs := p.w.newEncoders()
	out := make([][]byte, len(encs))
	for s, e := range encs {
		b := p.w.cfg.Bounds[s]
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
func (p *PushOnly) PushAll(ctx context.Context, iter int64, grad [][]byte) (iters []int64, got, unchecked []bool, err error) {
	fl := p.w.newFlight(iter, make([]float32, len(p.w.theta)))
	fl.batch = 1
	err = p.w.pushAll(ctx, fl, grad)
	unchecked = make([]bool, len(fl.reads))
	for s, r := range fl.reads {
		unchecked[s] = r.Unchecked
	}
	return slices.Clone(p.w.step.Iters), fl.got, unchecked, err
}

// Align runs align after a push that left the shards apart and returns
// the worker's clocks.
func (p *PushOnly) Align(ctx context.Context) ([]int64, error) {
	err := p.w.align(ctx, false)
	return slices.Clone(p.w.step.Iters), err
}
