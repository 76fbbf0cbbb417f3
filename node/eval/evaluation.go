package eval

import (
	"context"
	"errors"
	"math"
	"time"

	"dsspmesh/cudaops"
	"dsspmesh/node/records"
	"dsspmesh/shardapi"

	"github.com/prometheus/client_golang/prometheus"
)

// Evaluation is what the evaluation loop needs on a training node.
type Evaluation struct {
	Every time.Duration
	// Evaluate evaluates a snapshot's parameters: the built-in model on the
	// test set (a model of its own: sharing the worker's would stall its
	// gradients for a whole pass over it), or an external job's attached
	// trainer. An error skips this evaluation (logged).
	Evaluate func(ctx context.Context, theta []float32) (cudaops.Eval, error)
	// Worker lends its θ for a large model's evaluation; nil lends none.
	Worker Lender
	// DataDir keeps a large model's evaluated snapshot.
	DataDir string
	Seconds prometheus.Observer
	Count   prometheus.Counter
	// Done takes each evaluation made here (the node keeps it and sends
	// it to every member).
	Done func(ctx context.Context, e records.EvalResult)
	// AuditFraction is how many audits of each claim the mesh makes on
	// average (audit.go): this node audits a claim it accepted with
	// probability AuditFraction ÷ the other training members. 0: none.
	AuditFraction float64
}

// ErrNotNow, wrapped by an Evaluation.Evaluate error, skips this
// evaluation without a warning: what it waits for is reported elsewhere
// (an external job's evaluator with no trainer attached).
var ErrNotNow = errors.New("evaluation: not now")

// Lender is the worker lending θ (node/worker/lend.go).
type Lender interface {
	Borrow(ctx context.Context) (theta []float32, giveBack func([]*shardapi.Version), ok bool)
	Finished() bool
}

// LendBytes is the model size from which the evaluation borrows the
// worker's θ (node/worker/lend.go): a second copy of a smaller model costs
// less than the runtime's own base (node/memlimit's 64 MiB), and the pause would
// show in a small model's iterations. The evaluated snapshot, for
// GET /model.safetensors?evaluated, is then written to the data dir
// (EvaluatedFile) before θ goes back.
var LendBytes = 32 << 20 // a var only for tests (node's export_test.go)

// finite reports whether v is neither NaN nor ±Inf.
func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
