// Package shardapi is what talks to a parameter shard without raft: the
// worker's [Client], the RPC protocol a replica serves on
// mesh.Channel{KindRPC, shard} (wire.go), the errors and rejection
// [Reason]s, the shard's [Spec] and [Optimizer], and the reports a replica
// gives ([Status], [ReplicaStatus], [Applied], [Slice], [Configuration]).
// [PushID] (worker, iteration) names a push in every one of them, and the
// tensor codec ([Precision], tensor.go, int8.go) is the one layout of
// gradients and parameter slices for the client, the service and the FSM.
// Under int8 a Client keeps one residual per shard slice (error feedback,
// itself in int8 blocks: a quarter of the slice's fp32 bytes): encode a
// gradient once ([Client.Encode], or an [Encoder] fed [Client.Residual])
// and resend its bytes.
//
// [Identities] is a shard's replicated identity state (revoked node ids
// with the operator's MACs, pinned keys of legacy ids); [Client.Revoke]
// (op [OpRevoke]) asks a shard's leader to revoke a node, from any member.
//
// Package shard implements the replica on raft and uses these types under
// the same names; package node uses them through this package so that it
// does not depend on raft.
//
// # Client
//
// A [Client] has one push call: [Client.Push] takes a [Push] (iteration,
// samples, compute time, the encoded gradient, whether the worker keeps
// its slice, where to decode the slice) and returns one [PushReply]: the
// parameter slice unless Keep, the [Version] of the state the OK reflects,
// from shard 0 under the balance layer the worker's next [Assignment]s,
// and what the call cost (retries, bytes, time held by the gate). The
// reply is the only report of a push: the Client keeps no state about
// pushes for a caller to read afterwards.
//
// A Client resends the same (worker, iter) after a transport error or a
// NotLeader redirect, to whichever replica leads: the shard's dedupe makes
// that safe. A [*RejectError] is final and changed nothing. Errors other
// than rejections are ambiguous: a push whose reply was lost may or may
// not have been applied; the caller resends the same (worker, iter) later
// (an error wrapping [ErrDeadline] or ctx's), and the shard answers that
// resend from its state if the first was applied.
//
// It does not wait out ReplyTimeout to learn of a new leader: on silence
// (ProbeAfter without a frame, HeldSilence after a Held or Pending keep-alive,
// each plus a large frame's transfer time beyond 1 MiB at 256 KiB/s) or a
// broken stream it asks every other live replica at once (OpStatus: the
// leader each knows and its term), follows the newest term's answer, and
// never dials a node outside ClientConfig.Replicas (membership's live
// members); leaderhint.go has the rule. A Client runs one watcher
// goroutine per request in flight and short-lived probe goroutines; they
// touch only its atomic counters. A Client is not safe for concurrent use (one per
// shard per worker); a parameter slice it returns is owned by the caller.
//
// The types here carry no goroutines or locks; values are copies.
package shardapi
