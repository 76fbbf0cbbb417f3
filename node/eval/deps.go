package eval

import (
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
	// Evaluator is the node that evaluates now (named in a 404).
	Evaluator func() string
	Logger    *slog.Logger
	// Now reads the wall clock for the evaluations' times.
	Now func() time.Time
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
