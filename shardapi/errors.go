package shardapi

import (
	"errors"
	"fmt"

	"dsspmesh/clock"
	"dsspmesh/mesh"
)

// Sentinel errors of a shard.
var (
	ErrNotInitialized = errors.New("shard: not initialised")
	ErrBadEntry       = errors.New("shard: bad log entry")
	ErrBadSnapshot    = errors.New("shard: bad snapshot")
	ErrRejected       = errors.New("shard: push rejected")
	ErrNotLeader      = errors.New("shard: not the leader")
	ErrDeadline       = errors.New("shard: no replica answered in time")
	ErrReconfigActive = errors.New("shard: a configuration change is in flight")
	ErrBadTensor      = errors.New("shard: bad tensor payload")
)

// Reason says why a push was rejected.
type Reason uint8

const (
	ReasonBadLength      Reason = iota + 1 // gradient length differs from the shard's
	ReasonNonFinite                        // NaN or ±Inf in the gradient
	ReasonUnknownWorker                    // worker not in the clock table (never added, or removed)
	ReasonFuture                           // iteration beyond the worker's clock
	ReasonWaiting                          // next iteration pushed while the previous is held
	ReasonNotInitialized                   // the shard has no Init entry yet
	ReasonBadRequest                       // malformed fields (empty worker id, negative counts)
	ReasonNotPeer                          // the request names a worker other than the authenticated peer
	ReasonOutlier                          // gradient norm far above the shard's recent median (Spec.OutlierFactor)
	ReasonNonFiniteStep                    // the optimizer step would make a parameter NaN, ±Inf or reach ±2^64 (its square not finite in float32)
	ReasonOutOfBounds                      // a field beyond the job's bounds (Spec.MaxPushSamples, MaxIter, MaxComputeNs), or a gradient on a push of no samples
	NumReasons                             // one past the last reason
)

var reasonNames = [...]string{
	ReasonBadLength: "bad-length", ReasonNonFinite: "non-finite", ReasonUnknownWorker: "unknown-worker",
	ReasonFuture: "future-iteration", ReasonWaiting: "worker-waiting", ReasonNotInitialized: "not-initialized",
	ReasonBadRequest: "bad-request", ReasonNotPeer: "not-the-peer", ReasonOutlier: "norm-outlier",
	ReasonNonFiniteStep: "non-finite-step", ReasonOutOfBounds: "out-of-bounds",
}

func (r Reason) String() string {
	if r > 0 && r < NumReasons {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// RejectError is a push refused without any effect on the shard.
type RejectError struct {
	// Op is the request refused: "push" (also when empty), "add-worker"
	// or "remove-worker".
	Op     string
	Shard  uint32
	Worker clock.WorkerID
	Iter   int64
	Reason Reason
	Detail string
}

func (e *RejectError) Error() string {
	op := e.Op
	if op == "" {
		op = "push"
	}
	return fmt.Sprintf("shard %d: %s (%q, %d) rejected: %s: %s", e.Shard, op, e.Worker, e.Iter, e.Reason, e.Detail)
}

// Is makes errors.Is(err, ErrRejected) hold.
func (e *RejectError) Is(target error) bool { return target == ErrRejected }

// NotLeaderError says the replica asked does not lead the shard; Leader is
// its best guess of who does ("" when it knows none).
type NotLeaderError struct {
	Shard  uint32
	Leader mesh.NodeID
}

func (e *NotLeaderError) Error() string {
	if e.Leader == "" {
		return fmt.Sprintf("shard %d: not the leader, leader unknown", e.Shard)
	}
	return fmt.Sprintf("shard %d: not the leader, try %q", e.Shard, e.Leader)
}

// Is makes errors.Is(err, ErrNotLeader) hold.
func (e *NotLeaderError) Is(target error) bool { return target == ErrNotLeader }
