package eval

import (
	"context"
	"log/slog"
	"time"

	"dsspmesh/cudaops"
	"dsspmesh/mesh"
)

// Deps are the evaluation room's edges, built by the node that runs it.
type Deps struct {
	ID        mesh.NodeID
	Transport mesh.Transport
	Members   mesh.Membership
	// Job is the job once the node has joined the mesh's shards; false
	// before (a read then fails).
	Job func() (Job, bool)
	// Evaluator is the node that evaluates now: GET
	// /model.safetensors?evaluated on another node asks it.
	Evaluator func() string
	Logger    *slog.Logger
	// Now reads the wall clock for the evaluations' times.
	Now func() time.Time
	// AskControl opens a control-channel stream to m and sends it the
	// request of op (the node's control.go); the answer is the caller's
	// to read. Nil: ?evaluated serves this node's own snapshot only.
	AskControl func(ctx context.Context, m mesh.Member, op string) (mesh.Stream, error)
}

// Job is what a model read needs of the job.
type Job struct {
	// Model is the model trained (its layout and size).
	Model *cudaops.Model
	// Bounds is each shard's range of the flat parameter vector;
	// Candidates where to look for a shard's leader.
	Bounds     [][2]int
	Candidates func(shard uint32) []mesh.NodeID
	// Name and Dataset are the job's model and dataset, Spec the job
	// spec as JSON: each snapshot's metadata.
	Name, Dataset string
	Spec          []byte
}
