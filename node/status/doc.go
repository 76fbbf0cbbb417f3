// Package status is the status room of a node: what it shows. It owns
// the /status record ([Status], whose JSON shape the dashboard, `dssp
// status`, `dssp up` and the fault suite read), the HTTP handler that
// serves it with the dashboard and the Prometheus metrics
// ([NewHTTPHandler], [NewMetrics]), the event record ([EventLog]), the
// view of the other members ([View]) and the debug history ([History],
// behind --history-dir). It reads the node only through the functions it
// is given: a status func, the control-channel ask of [Watch].
//
// # The mesh from any node
//
// Every second a node asks each other live member for its view (control op
// "view", one call per member, each bounded by a second): the shards it
// hosts (leader, term, voters), the clock table of the lowest shard it
// leads, and its worker loop. The node's status merges the answers into what the
// node knows itself, so /status on any node describes every shard and every
// worker; what came from a peer names it and carries its age (a member that
// stops answering keeps its last answer, ageing, until membership drops it).
// Status itself never waits on the network.
//
// The same loop compares every shard's (leader, term) with its last sighting
// and records a leader event when it changes. Membership events (join,
// suspect, failed, leave, rejected peer) and pushes this node's worker sees
// rejected join them in a bounded in-memory record (the last 256, with
// timestamps) served in /status. The record is where they are logged too
// ([EventLog.LogTo]), once each, at the level an operator reads them: joins,
// leaves, suspicions and new leaders at info, a member declared dead and a
// refused push at warn, refusals paced to one line per reason per 10 s
// with the count held back.
//
// /status is encoded before it is written: NaN and ±Inf become null
// ([MarshalFinite]), and an encoding failure is a 500, never an empty 200.
//
// [CountLibraryTelemetry] (called by dssp node, once per process) counts
// memberlist's gossip bytes and raft's answered heartbeats from their
// go-metrics calls into /metrics (dssp_gossip_sent_bytes_total,
// dssp_raft_heartbeats_total), the per-node costs dssp bench scale reads.
//
// # Concurrency
//
// Every exported function and method is safe for concurrent use; the
// status func given to the handler and the metrics is called from HTTP
// handlers and scrapes at once. [View.Watch] is one goroutine (plus one
// per member asked, each bounded by a second). EventLog, View and History
// each hold one lock of their own, never across a call out.
package status
