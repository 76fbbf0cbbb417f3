package shardapi

// Assignment is a worker's share of the global batch for one iteration
// under the balance layer (docs/design.md#balance): shard 0 decides the
// allocation as replicated state and puts, in its OK reply to push
// (w, iter), the assignment of w's next iteration iter+1 (and, under
// Spec.Pipeline, of iter+2 in Reply.Ahead). Every replica and every leader
// of shard 0 gives the same answer for the same push.
type Assignment struct {
	// Iter is the iteration the assignment is for.
	Iter int64 `msgpack:"i" json:"iter"`
	// Version of the allocation (the balancer's count of changes).
	Version uint64 `msgpack:"v" json:"version"`
	// Batch is the number of samples to compute the iteration on.
	Batch int64 `msgpack:"b" json:"batch"`
	// Pos is the position in the job's data order (cudaops.Order) of the
	// worker's first sample; −1 when the worker is not in the allocation in
	// force yet (a joiner), which then reads where it likes.
	Pos int64 `msgpack:"p" json:"pos"`
	// Global is the global batch, Σ of every worker's Batch.
	Global int64 `msgpack:"g" json:"global"`
	// PredictNs is the balancer's predicted compute time of Batch, 0
	// before the worker's model has enough observations. Under local
	// rounds a worker takes a short probe round on an assignment without
	// one (node/worker), so that its first rounds time it.
	PredictNs int64 `msgpack:"t" json:"predicted_ns"`
}

// Share returns a when it names a slice of the data order for the worker
// to read (Batch samples from Pos), and nil otherwise: for nil, or for a
// joiner's assignment, whose batch the worker reads from a position of
// its own.
func (a *Assignment) Share() *Assignment {
	if a == nil || a.Pos < 0 || a.Batch <= 0 {
		return nil
	}
	return a
}
