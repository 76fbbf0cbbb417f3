package node

import (
	"hash/fnv"

	"dsspmesh/cudaops"
)

// The worker's side of the balance layer (docs/design.md#balance). With
// JobSpec.Balance, shard 0's OK replies carry the worker's assignment for
// its next iteration (shardapi.Client.Assign): the batch size and the
// position of its slice in the job-wide data order (cudaops.Order, one
// seeded permutation of the training set per epoch). Without one yet (the
// first iteration, a joiner not in the allocation in force) it computes
// the job's batch from a position of its own.

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

// next fills w.x and w.labels with this iteration's mini-batch and returns
// its size: the assignment's under the balance layer, else the job's batch
// from the worker's own loader.
func (w *worker) next() int {
	if w.batches == nil {
		w.loader.Next(w.x, w.labels)
		return w.spec.BatchSize
	}
	b, pos := int64(w.spec.BatchSize), int64(-1)
	if a := w.clients[0].Assign; a != nil && a.Batch > 0 {
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
	return int(b)
}

// noteAssignment copies the latest assignment into the worker's status.
// Called by the loop goroutine after pushAll, with w.mu held.
func (w *worker) noteAssignmentLocked() {
	if w.batches == nil {
		return
	}
	if a := w.clients[0].Assign; a != nil {
		w.stats.Batch = a.Batch
		w.stats.GlobalBatch = a.Global
		w.stats.AllocVersion = a.Version
		w.stats.PredictedSeconds = float64(a.PredictNs) / 1e9
	}
}
