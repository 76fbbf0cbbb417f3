// Package shardapi is what talks to a parameter shard without raft: the
// worker's [Client], the RPC protocol a replica serves on
// mesh.Channel{KindRPC, shard} (wire.go), the errors and rejection
// [Reason]s, the shard's [Spec] and [Optimizer], and the reports a replica
// gives ([Status], [ReplicaStatus], [Applied], [Slice], [Configuration]).
// [PushID] (worker, iteration) names a push in every one of them, and the
// tensor codec ([Precision], tensor.go, int8.go) is the one layout of
// gradients and parameter slices for the client, the service and the FSM.
// Under int8 a Client keeps one residual per shard slice (error feedback,
// itself in int8 blocks: a quarter of the slice's fp32 bytes):
// encode a gradient once and resend its bytes.
// Package shard implements the replica on raft and uses these types under
// the same names; package node uses them through this package so that it
// does not depend on raft.
//
// # Client
//
// A [Client] pushes one worker's gradients to one shard and returns the
// fresh parameters (and, from shard 0 under the balance layer, the
// worker's next [Assignment] in Client.Assign). It resends the same (worker, iter) after a transport
// error or a NotLeader redirect, to whichever replica leads: the shard's
// dedupe makes that safe. A [*RejectError] is final and changed nothing.
// Errors other than rejections and ctx's are ambiguous until a later
// resend settles them.
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
