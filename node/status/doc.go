// Package status is the status room of a node: what it shows. It owns
// the /status record ([Status], whose JSON shape the dashboard, `dssp
// status`, `dssp up` and the fault suite read), the HTTP handler that
// serves it with the dashboard and the Prometheus metrics
// ([NewHTTPHandler], [NewMetrics]), the event record ([EventLog]), the
// view of the other members ([View]), the dashboard's history ([Series],
// at /status/history) and the debug history ([History], behind
// --history-dir). It reads the node only through the functions it
// is given: a status func, the control-channel ask of [Watch].
//
// # The mesh from any node
//
// Every second a node asks each other live member for its view (control op
// "view", one call per member, each bounded by a second): the shards it
// hosts (leader, term, voters), the clock table of the lowest shard it
// leads, its worker loop, and its HTTP address (each member's in /status's
// members, as the member itself announced it). The node's status merges the answers into what the
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
// # Quorum
//
// A node judges the quorum of every shard it hosts each time it builds its
// status or answers a view ([View.JudgeQuorum], a pure [JudgeQuorum] over
// the shard's voters, its replica's leader, the last time the node saw
// one, and which voters are reachable: itself, and live members whose
// latest view answer is at most 2.5 s old, more on a mesh larger than
// viewPeers+1). A shard is ok with a leader, lost after [QuorumGrace]
// (2 s) with none and fewer than a majority of its voters reachable —
// frozen until they come back, so its record names them (WaitingFor) —
// and electing otherwise. A node hosting no replica shows the verdict its
// hosts answered once the leader it knew stops answering (a fresh
// leader's answer wins, as on the majority side of a partition). Every
// node turns what its status shows into one quorum-lost event and WARN
// line per loss (again when the voters it waits for change) and one
// quorum-regained event and INFO line when a leader is back; [Warnings]
// lists every lost shard for the dashboard and `dssp status` (and every
// replica here that cannot start, or has had no Raft configuration and
// no leader for [NoConfigurationGrace]: [NoConfiguration]), and
// dssp_shard_quorum_lost{shard} is 1 while it is lost. The same loop
// warns, once the member count has held 5 s, while the mesh has fewer
// live members than the job's replication ([MeshTooSmall]).
//
// # The dashboard's history
//
// A page polls /status every second and draws what it sees; what happened
// before it opened comes from [Series]: every second the node samples its
// own status (each trainer's iterations computed, iterations per second,
// wait share and loss, and the newest evaluation) into rings of an hour,
// at most [SeriesMaxWorkers] workers, 32 bytes a point (the bound in bytes
// is in [Series]' doc). The page fetches /status/history once when it
// opens and draws it with what follows.
//
// /status is encoded before it is written: NaN and ±Inf become null
// ([MarshalFinite]), and an encoding failure is a 500, never an empty 200.
//
// [NewMetrics] exports the worker loop's counters and histograms only after
// [Metrics.RegisterWorker] (a node that trains), a shard's leadership as
// dssp_shard_is_leader{shard} (no label naming the leader), and the
// process collector's metrics without process_network_*_bytes_total, which
// count the whole network namespace's traffic, not the node's.
//
// [CountLibraryTelemetry] (called by dssp node, once per process) counts
// memberlist's gossip bytes and raft's answered heartbeats from their
// go-metrics calls into /metrics (dssp_gossip_sent_bytes_total,
// dssp_raft_heartbeats_total), the per-node costs dssp-lab bench scale reads.
//
// # Concurrency
//
// Every exported function and method is safe for concurrent use; the
// status func given to the handler and the metrics is called from HTTP
// handlers and scrapes at once. [View.Watch] is one goroutine (plus one
// per member asked, each bounded by a second). EventLog, View and History
// each hold one lock of their own, never across a call out; so does
// Series, whose Run is one goroutine that calls the status func between
// locks.
package status
