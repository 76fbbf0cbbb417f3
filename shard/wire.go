package shard

import "dsspmesh/clock"

// RPC frames on mesh.Channel{KindRPC, shard}: a msgpack header (below) and a
// raw payload of little-endian float32 — the gradient in a push request,
// the parameter slice in an OK reply to a push or a read, empty otherwise. A worker
// keeps one stream per shard replica and may send a request before the
// previous reply; replies name (Op, Worker, Iter) and a push may get Held
// frames before its final reply.
type op uint8

const (
	opPush         op = iota + 1 // gradient in, parameters out
	opAddWorker                  // Iter: the worker's clock elsewhere; reply Clock: its clock here
	opRemoveWorker               //
	opStatus                     // reply Index: the replica's applied index
	opRead                       // a linearizable read (Replica.Read): reply Clock t_min, Max, Index, Samples, the slice as payload
)

type request struct {
	Op        op             `msgpack:"op"`
	Worker    clock.WorkerID `msgpack:"w"`
	Iter      int64          `msgpack:"i"`
	Samples   int64          `msgpack:"s"`
	ComputeNs int64          `msgpack:"c"`
}

type replyStatus uint8

const (
	statusOK        replyStatus = iota + 1 // final: done (parameters for a push)
	statusHeld                             // not final: the gate holds the push
	statusNotLeader                        // final: try Leader
	statusRejected                         // final: Reason, Detail; nothing changed
	statusError                            // final, ambiguous: resend
)

type reply struct {
	Op     op             `msgpack:"op"`
	Worker clock.WorkerID `msgpack:"w"`
	Iter   int64          `msgpack:"i"`
	Status replyStatus    `msgpack:"st"`
	Leader string         `msgpack:"l,omitempty"`
	Reason Reason         `msgpack:"r,omitempty"`
	Detail string         `msgpack:"d,omitempty"`
	Clock  int64          `msgpack:"c,omitempty"`
	Index  uint64         `msgpack:"x,omitempty"`
	// Max and Samples answer an opRead: t_max and the samples applied.
	Max     int64 `msgpack:"m,omitempty"`
	Samples int64 `msgpack:"n,omitempty"`
}
