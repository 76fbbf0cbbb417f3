// Package node is one dssp process: its configuration, its lifecycle
// (bootstrap a mesh or join one by seed, leave gracefully, recover after a
// crash) and the control channel between nodes. It starts and stops the
// rooms below it, each built from an explicit Deps or Config and none
// holding the Node; each room's doc.go states what it owns:
//
//   - node/worker: the worker loop, a step machine behind one Compute
//     interface, with the lab's emulation as a decorator (worker.go builds
//     it from the Go model's compute or an attached trainer's);
//   - node/shards: the shard manager (replicas, placement, reconcile);
//   - node/status: /status, /metrics, the dashboard, events, the mesh
//     view ([Node.Status] merges what the other members last said into
//     what the node knows itself; it never waits on the network);
//   - node/eval: model snapshots, GET /model.safetensors, the evaluation,
//     checkpoints, and the evaluations held and received (eval.Claims: a
//     diverged one stops the worker, eval.go's diverged);
//   - node/trainer: --trainer external's socket (trainer.Host); the node
//     runs a worker only while a trainer is attached (external.go);
//   - node/trust: identities, revocations and POST /revoke; the node's
//     membership view (n.members) is the room's, without revoked nodes;
//   - node/memlimit: the soft memory limit set once the job is known;
//   - node/join (seeds), node/datadir (the data directory), node/job (the
//     job spec and --init-from), node/records (the records rooms share).
//
// node names no room's type again: its callers import the room
// (node/status, node/job, node/datadir, node/records, ...) for its names.
// No room imports node or another room (repo_test.go's mayImport;
// node/records, node/job and node/datadir are shared records),
// and inside node and each room no file-to-file arrow goes back up
// (rooms_test.go). A node started with --train=false only hosts shards:
// it loads the model (for its size and initial θ) but no dataset and runs
// no worker.
//
// # Lifecycle
//
// A node is assembled from [Deps]: its data directory, a mesh.Transport, a
// mesh.Membership, the [shards.Replicas] that open its shard replicas, an
// optional HTTP listener and an optional [records.Observer]. The dssp command builds them
// with node/assemble (QUIC, memberlist, raft over bbolt; a second process
// on the same data directory is refused, a port in use is an error naming
// the flag); tests build them over mesh's in-memory transport and
// membership. node itself never depends on raft. [Run] owns its Deps and
// closes them before it returns. It then:
//
//   - without seeds and without a persisted spec it bootstraps: the spec
//     comes from its flags, it bootstraps every shard's Raft group with
//     itself as the only voter and proposes Init (θ from the spec's seed,
//     or --init-from's file: job.LoadInitFrom, Deps.InitParams);
//   - with seeds (--join, or the peers persisted by an earlier run) it
//     joins (node/join), fetches the job spec from a member over the
//     control channel and adopts it; a flag set explicitly (command line,
//     DSSP_* environment or config file) that disagrees is a
//     [*job.ConflictError]; a data directory holding another job's spec is
//     refused.
//
// From then on the shard manager follows membership and hosts the
// replicas placement assigns; each replica reports its applied entries
// and led terms through [shards.ReplicaHooks] to the [records.Observer]. When a shard's
// slice exceeds 1 MiB, the worker and the evaluation loop start only once
// every shard's voters are its placement, or after 3 minutes
// (node/shards/trainstart.go).
//
// SIGTERM/SIGINT (ctx cancelled) stops the worker, removes it from every
// shard it can reach, leaves the gossip mesh (peers see a leave, not a
// failure) and shuts the replicas down. A node killed with SIGKILL restarts
// with the same --data-dir: same id, same spec, each shard's Raft state
// recovered from its bbolt log and snapshots (raftstore), seeds from the
// persisted peers.
//
// # Control channel
//
// mesh.Channel{KindRPC, [ControlShard]} carries node-to-node requests
// (control.go): "spec" (the job spec a joiner adopts), "eval" (the
// evaluator's result, judged by eval.Claims), "view" (the mesh view,
// with the revocations held), "evaluated" (the evaluated model file, for
// a node asked for it that is not the evaluator) and "revoke" (an
// operator's revocation relayed, its MAC checked by the receiver).
//
// # Concurrency
//
// Run owns every goroutine it starts and waits for them before returning;
// once the shards are open it starts the named loops (lifecycle.go's
// startLoops: shards, view, trust, worker, evaluation).
// [Node.Status] is safe for concurrent use (HTTP handlers, the metrics
// collector); it takes Node.mu for reading and never calls into Raft or
// the network while holding it. Lock order: Node.mu guards the node's
// own fields and is held across no call into a room; the funcs a room's
// Deps hold may take it (for reading) while the room holds a lock of its
// own (node/trust's sync lock), never the other way round.
package node
