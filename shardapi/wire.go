package shardapi

import (
	"fmt"

	"dsspmesh/clock"
)

// Op is what a request asks of a shard replica.
//
// The RPC protocol of a replica: frames on mesh.Channel{KindRPC, shard},
// a msgpack header ([Request] or [Reply]) and a raw tensor payload in the
// layout of tensor.go — the gradient in a push request, the parameter
// slice in an OK reply to a push or a read, empty otherwise. A worker keeps
// one stream per shard replica and may send a request before the previous
// reply; replies name (Op, Worker, Iter) and a push may get Held frames
// before its final reply.
type Op uint8

const (
	OpPush         Op = iota + 1 // gradient in, parameters out
	OpAddWorker                  // Iter: the worker's clock elsewhere; reply Clock: its clock here
	OpRemoveWorker               //
	OpStatus                     // reply Index: the replica's applied index; Leader, Term: the leader it knows (itself when it leads) and its term
	OpRead                       // a linearizable read (Replica.Read): reply Clock t_min, Max, Index, Samples, the slice as payload
	OpRevoke                     // Worker: the node id revoked (not the requester, who is the stream's peer), payload: the operator's MAC; reply OK once applied
	// OpDigest (the agreement check, shard/checker.go): Iter: an applied
	// index; reply OK with the replica's state digest there as payload (32
	// bytes), OK with no payload and Detail when the replica diverged (why),
	// or Error when it holds no digest of that index.
	OpDigest
	// OpEvicted: whether the requester was evicted from the shard as
	// diverged; reply OK with Index: the check that named it, or Rejected.
	OpEvicted
	// OpClaim (shard 0): the requester, the evaluation lease's holder,
	// records its evaluation claim (payload: a msgpack [Claim] whose By is
	// the stream's peer); reply OK once applied, Rejected when the shard
	// refused it (not the holder, or another digest for that sequence).
	OpClaim
	// OpClaims (shard 0): the claims the shard recorded, newest last, read
	// on the leader after a barrier; reply OK with a msgpack []Claim.
	OpClaims
)

// String names the op in errors: push, add-worker, remove-worker, status, read, revoke, digest, evicted, claim, claims.
func (o Op) String() string {
	switch o {
	case OpPush:
		return "push"
	case OpAddWorker:
		return "add-worker"
	case OpRemoveWorker:
		return "remove-worker"
	case OpStatus:
		return "status"
	case OpRead:
		return "read"
	case OpRevoke:
		return "revoke"
	case OpDigest:
		return "digest"
	case OpEvicted:
		return "evicted"
	case OpClaim:
		return "claim"
	case OpClaims:
		return "claims"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// PushID names one push: a worker's gradient of one iteration for one
// shard. A shard applies each PushID at most once; a resend after an
// ambiguous failure carries the same PushID. Requests and replies of other
// ops reuse it: Worker is the requester, Iter whatever the op says (an
// AddWorker's start clock, a read's sequence number).
//
// Every struct that names a push embeds it (Request, Reply, [PushMeta],
// [PushResult], the shard's log entry and held replies, node's history),
// so its msgpack keys "w" and "i" and JSON keys "w" and "i" are the same
// everywhere.
type PushID struct {
	Worker clock.WorkerID `msgpack:"w" json:"w"`
	Iter   int64          `msgpack:"i" json:"i"`
}

// PushMeta is what a push says about its gradient besides the tensor.
type PushMeta struct {
	PushID
	Samples   int64 `msgpack:"s"` // mini-batch size behind the gradient; 0 for a join's zero push
	ComputeNs int64 `msgpack:"c"` // the worker's compute time for it, in ns
	// Want (under Spec.BalanceStep: --local-steps auto with --balance) is
	// the global round, in samples, this worker's link asks for: the one
	// at which its share would keep its push within a tenth of its round
	// (docs/design.md, "H from the link"); 0 when it does not know yet.
	// Shard 0 sizes the job's round from the workers' wants; other shards
	// and other jobs ignore it.
	Want int64 `msgpack:"r,omitempty"`
}

// Request is the header of a request frame: Op and, for a push, its
// metadata (the tensor is the payload).
type Request struct {
	Op Op `msgpack:"op"`
	PushMeta
	// Keep (a push): the worker keeps its copy of the slice, so the OK
	// carries no parameters, only the shard's version ([Push].Keep).
	Keep bool `msgpack:"k,omitempty"`
}

// ReplyStatus says whether a reply is final and how it ended.
type ReplyStatus uint8

const (
	ReplyOK        ReplyStatus = iota + 1 // final: done (parameters for a push)
	ReplyHeld                             // not final: the gate holds the push
	ReplyNotLeader                        // final: try Leader
	ReplyRejected                         // final: Reason, Detail; nothing changed
	ReplyError                            // final, ambiguous: resend
	// ReplyPending, not final: the leader has the push queued or its entry
	// in flight (not yet committed and applied). Sent every HeldKeepAlive
	// while that lasts, so a client tells a leader that is slow to
	// replicate a large entry from a silent (dead, stopped) one.
	ReplyPending
)

// Reply is the header of a reply frame.
type Reply struct {
	Op Op `msgpack:"op"`
	PushID
	Status ReplyStatus `msgpack:"st"`
	Leader string      `msgpack:"l,omitempty"`
	Reason Reason      `msgpack:"r,omitempty"`
	Detail string      `msgpack:"d,omitempty"`
	Clock  int64       `msgpack:"c,omitempty"`
	Index  uint64      `msgpack:"x,omitempty"`
	// Max and Samples answer an OpRead: t_max and the samples applied.
	Max     int64 `msgpack:"m,omitempty"`
	Samples int64 `msgpack:"n,omitempty"`
	// Assign, in shard 0's OK to a push (w, iter) under the balance
	// layer: the worker's batch for its next iteration, iter+1. Ahead, only
	// under Spec.Pipeline: its batch for iter+2, which it computes while
	// its push of iter+1 is in flight.
	Assign *Assignment `msgpack:"a,omitempty"`
	Ahead  *Assignment `msgpack:"a2,omitempty"`
	// Evaluator, in shard 0's OK to a push: the worker the evaluation
	// lease names (the lowest id among the workers with a push applied;
	// docs/design.md, "The evaluator").
	Evaluator string `msgpack:"ev,omitempty"`
	// Term is the replica's raft term in a status or NotLeader reply, so
	// a client weighing several replicas' Leader hints trusts the newest.
	Term uint64 `msgpack:"tm,omitempty"`
}
