package node

import (
	"hash/fnv"

	"dsspmesh/cudaops"
	"dsspmesh/shardapi"
)

// The worker's side of the balance layer (docs/design.md#balance). With
// JobSpec.Balance, shard 0's OK reply to push t carries the worker's
// assignment for iteration t+1 and, under --pipeline, for t+2 (each
// naming its iteration): the batch size and the position of its slice in
// the job-wide data order (cudaops.Order, one seeded permutation of the
// training set per epoch). The loop keeps the two of the last OK it
// landed (w.assigned, pipeline.go) and computes iteration t on the one
// named for t. Without one (the first iteration, a joiner not in the
// allocation in force) it computes the job's batch from a position of its
// own.

// batchSource gives each iteration's mini-batch under the balance layer.
type batchSource struct {
	order *cudaops.Order
	own   int64 // next position of the worker's own reading, without an assignment
}

func newBatchSource(n *Node, spec JobSpec) (*batchSource, error) {
	o, err := cudaops.NewOrder(n.train.Len(), spec.Seed)
	if err != nil {
		return nil, err
	}
	h := fnv.New64a()
	h.Write([]byte(n.id))
	return &batchSource{order: o, own: int64(h.Sum64() % uint64(n.train.Len()))}, nil
}

// next fills w.x and w.labels with iteration t's mini-batch and returns
// its size and the assignment it follows (nil for none): the one shard 0
// named for t under the balance layer, else the job's batch from the
// worker's own loader or, under the balance layer without an assignment
// for t, from a position of its own.
func (w *worker) next(t int64) (int, *shardapi.Assignment) {
	if w.batches == nil {
		w.loader.Next(w.x, w.labels)
		return w.spec.BatchSize, nil
	}
	b, pos := int64(w.spec.BatchSize), int64(-1)
	a := w.assignment(t)
	if a != nil && a.Batch > 0 {
		b, pos = a.Batch, a.Pos
	}
	if pos < 0 {
		pos = w.batches.own
		w.batches.own += b
	}
	in := w.n.model.InputSize()
	if int64(cap(w.labels)) < b {
		w.x, w.labels = make([]float32, int(b)*in), make([]int, b)
	}
	w.x, w.labels = w.x[:int(b)*in], w.labels[:b]
	w.batches.order.Fill(w.n.train, pos, w.x, w.labels)
	return int(b), a
}

// noteAssignmentLocked copies the assignment a completed iteration
// followed into the worker's status. Called by the loop goroutine with
// w.mu held.
func (w *worker) noteAssignmentLocked(a *shardapi.Assignment) {
	if w.batches == nil || a == nil {
		return
	}
	w.stats.Batch = a.Batch
	w.stats.GlobalBatch = a.Global
	w.stats.AllocVersion = a.Version
	w.stats.PredictedSeconds = float64(a.PredictNs) / 1e9
}
