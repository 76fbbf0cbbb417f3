package node

import (
	"log/slog"
	"net"
	"time"

	"dsspmesh/mesh"
	"dsspmesh/node/datadir"
	"dsspmesh/node/records"
	"dsspmesh/node/shards"
)

// Deps are a node's edges to the world, built by the caller (the dssp
// command through node/assemble; tests with mesh's in-memory transport and
// membership). [Run] owns them from the call on: it closes Dir, Transport,
// HTTP and an Observer that is an io.Closer, and shuts Membership down,
// before it returns, error or not.
type Deps struct {
	// Dir is the node's open data directory; Dir.ID is the node's id.
	Dir *datadir.Dir
	// Transport carries pushes, Raft and the control channel; its LocalID
	// is Dir.ID.
	Transport mesh.Transport
	// Membership is the gossip view; its local Meta names Transport's
	// address. Run joins through it (Config.Join or the persisted peers).
	Membership mesh.Membership
	// Replicas opens this node's replica of a shard.
	Replicas shards.Replicas
	// HTTP, if set, serves /metrics, /status and the dashboard.
	HTTP net.Listener
	// Observer, if set, sees every push of the worker, every entry the
	// replicas apply and every term they lead (the debug history).
	Observer records.Observer
	Logger   *slog.Logger
	// InitParams are the parameters of Config.Spec.InitFrom (LoadInitFrom),
	// read before the data dir was opened; Run reads the file itself when
	// they are nil and InitFrom is set.
	InitParams []float32
	// Now reads the wall clock for the times the node reports (/status,
	// the event record, evaluations, peers last seen); nil is time.Now.
	// Durations are measured on Go's monotonic clock regardless.
	Now func() time.Time
	// VerifyOperator checks an operator's request over HTTP (POST
	// /revoke): mesh.Security.VerifyOperator on a node; nil refuses every
	// such request.
	VerifyOperator func(op, arg string, mac []byte) bool
}
