package eval

import (
	"context"
	"crypto/ed25519"
	"log/slog"
	"time"

	"dsspmesh/cudaops"
	"dsspmesh/mesh"
	"dsspmesh/node/records"
	"dsspmesh/shardapi"
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
	// Key is the node's own key, which signs its evaluation claims
	// (digest.go); nil signs none.
	Key ed25519.PrivateKey
	// Claim takes the claim the evaluator sent with its evaluated model
	// (op "evaluated") as a broadcast claim is taken (Claims.Receive); an
	// error refuses the model. Nil: only the claim's signature and
	// evaluator are checked.
	Claim func(ctx context.Context, peer mesh.NodeID, e records.EvalResult) error
	// Export bounds GET /model.safetensors; zero fields take
	// DefaultExportLimits'.
	Export ExportLimits
	// Event records an event of the node's (the audit's disagreements);
	// nil: none.
	Event func(records.Event)
	// Book is where evaluation claims are recorded (record.go). Nil:
	// shard 0, through the room's own client of it.
	Book ClaimBook
}

// ClaimBook records evaluation claims and reads them back: shard 0's
// claims sub-machine through shardapi.Client's Claim and Claims.
type ClaimBook interface {
	Claim(ctx context.Context, c shardapi.Claim) error
	Claims(ctx context.Context) ([]shardapi.Claim, error)
}

// ExportLimits bound GET /model.safetensors on a node (download.go). A
// response's write deadline is Base + its size / RateFloor from when its
// header is written, and each 64 KiB of it must be taken within Stall: a
// client that reads slower than RateFloor, or stops reading, is cut and
// what the response held freed. At most PerClient responses run at once
// for one client address and Total for all; a further request is a 503 at
// once. At most Concurrent fresh snapshots are held for responses, each
// shared by the requests that come within FreshFor of its read.
type ExportLimits struct {
	Base       time.Duration
	RateFloor  int64 // bytes per second
	Concurrent int
	Stall      time.Duration
	PerClient  int
	Total      int
	FreshFor   time.Duration
}

// DefaultExportLimits: a 100 MB model has 10 s + 95 s to reach a client,
// a client that stops reading is cut 5 s later, and a node holds at most
// 2 fresh snapshots (200 MB for that model) for its downloads.
var DefaultExportLimits = ExportLimits{Base: 10 * time.Second, RateFloor: 1 << 20, Concurrent: 2, Stall: 5 * time.Second,
	PerClient: 4, Total: 32, FreshFor: time.Second}

// withDefaults fills l's zero fields from DefaultExportLimits.
func (l ExportLimits) withDefaults() ExportLimits {
	if l.Base <= 0 {
		l.Base = DefaultExportLimits.Base
	}
	if l.RateFloor <= 0 {
		l.RateFloor = DefaultExportLimits.RateFloor
	}
	if l.Concurrent <= 0 {
		l.Concurrent = DefaultExportLimits.Concurrent
	}
	if l.Stall <= 0 {
		l.Stall = DefaultExportLimits.Stall
	}
	if l.PerClient <= 0 {
		l.PerClient = DefaultExportLimits.PerClient
	}
	if l.Total <= 0 {
		l.Total = DefaultExportLimits.Total
	}
	if l.FreshFor <= 0 {
		l.FreshFor = DefaultExportLimits.FreshFor
	}
	return l
}

// deadline is the write deadline of a response of size bytes from now.
func (l ExportLimits) deadline(now time.Time, size int64) time.Time {
	return now.Add(l.Base + time.Duration(float64(size)/float64(l.RateFloor)*float64(time.Second)))
}

// Job is what a model read needs of the job.
type Job struct {
	// Layout is the model trained: its tensors' names and shapes in the
	// flat vector (a built-in model's, or an external job's, the trainers'
	// own names), which every snapshot file is written with.
	Layout cudaops.Layout
	// Bounds is each shard's range of the flat parameter vector;
	// Candidates where to look for a shard's leader.
	Bounds     [][2]int
	Candidates func(shard uint32) []mesh.NodeID
	// Name and Dataset are the job's model and dataset, Spec the job
	// spec as JSON: each snapshot's metadata.
	Name, Dataset string
	Spec          []byte
}
