// Package node is one dssp process: its configuration, data directory and
// job spec; its lifecycle (bootstrap a mesh or join one by seed, host the
// shards placement assigns, leave gracefully, recover after a crash); the
// worker loop; evaluation of the global parameters; and HTTP (/metrics,
// /status, the dashboard). It assembles them from three rooms below it —
// node/worker (the worker loop), node/shards (the shard manager) and
// node/status (status, HTTP, metrics, events) — and the records they
// share (node/records); no room imports node or another room.
//
// A node started with --train=false only hosts shards: it loads the model
// (for its size and initial θ) but no dataset and runs no worker.
// What a node shows (/status, /metrics, the dashboard, the event record,
// the debug history) is the status room, node/status.
//
// # Lifecycle
//
// A node is assembled from [Deps]: its data directory, a mesh.Transport, a
// mesh.Membership, the [Replicas] that open its shard replicas, an optional
// HTTP listener and an optional [Observer]. The dssp command builds them
// with node/assemble (QUIC, memberlist, raft over bbolt; a second process
// on the same data directory is refused, a port in use is an error naming
// the flag); tests build them over mesh's in-memory transport and
// membership. node itself never depends on raft. [Run] owns its Deps and
// closes them before it returns. It then:
//
//   - without seeds and without a persisted spec it bootstraps: the spec
//     comes from its flags, it bootstraps every shard's Raft group with
//     itself as the only voter and proposes Init (θ from the spec's seed);
//   - with seeds (--join, or the peers persisted by an earlier run) it
//     joins, fetches the job spec from a member over the control channel
//     (mesh.Channel{KindRPC, [ControlShard]}) and adopts it; a flag set
//     explicitly (command line, DSSP_* environment or config file) that
//     disagrees is a [*SpecConflictError]; a data directory holding another
//     job's spec is refused.
//
// From then on the shard manager (node/shards) follows membership and
// hosts the replicas placement assigns; each replica reports its applied
// entries and led terms through [ReplicaHooks] to the [Observer]. When a
// shard's slice exceeds 1 MiB, the worker and the evaluation loop start
// only once every shard's voters are its placement, or after 3 minutes
// (node/shards/trainstart.go).
//
// SIGTERM/SIGINT (ctx cancelled) stops the worker, removes it from every
// shard it can reach, leaves the gossip mesh (peers see a leave, not a
// failure) and shuts the replicas down. A node killed with SIGKILL restarts
// with the same --data-dir: same id, same spec, each shard's Raft state
// recovered from its bbolt log and snapshots (raftstore), seeds from the
// persisted peers.
//
// # Worker loop
//
// The worker is a room of its own, node/worker: the loop, its decisions
// as a step machine, the compute interface and the lab's emulation around
// it. The node builds it ([Node.newWorker]) from its parts: the Go
// model's compute, the shard manager's candidates, the metrics, the
// observer and the event record.
//
// # Evaluation
//
// The live training member with the lowest node id (the evaluator) reads
// a model snapshot (below) every --eval-every, evaluates it on the test set
// and sends the result to every member over the control channel, so every
// node's /status carries the mesh's accuracy; EvalResult.Iter is the
// snapshot's clock. When the read fails (shards electing leaders) the tick
// is skipped. When that node dies the next lowest takes over at its next
// tick.
//
// Evaluations are ordered by EvalResult.Seq — the samples the shards had
// applied when they were read, summed over the shards, Raft-replicated and
// so agreed by the mesh — never by wall-clock time alone: a peer with a
// fast clock cannot freeze the evaluation shown. An evaluation is accepted
// only from the node it names (the control stream's authenticated peer).
//
// # Bad gradients and a diverging job
//
// A gradient the shards refuse (NaN/Inf, a norm outlier under
// --outlier-factor, a step that would make a parameter non-finite) is
// logged, counted (LocalWorker.Refused, worker_gradients_refused_total) and
// replaced by the worker (node/worker). Shard leaders count refusals per worker (Status.Refusals, with
// the repeat offenders, and dssp_shard_gradients_refused_total). A non-finite
// loss at evaluation marks the evaluation Diverged; every node that
// receives it stops its worker with a message saying so (LocalWorker.Stopped)
// rather than train on garbage. The shards keep their last parameters,
// which the FSM guarantees finite, and the evaluator never checkpoints a
// diverged state: the newest checkpoint is the last good one.
//
// --insecure is shown in /status (insecure), /metrics (dssp_insecure) and
// the dashboard.
//
// # Model snapshots
//
// A snapshot is read by one node from every shard concurrently (up to
// 32 MiB of fp32 replies in flight: a 100 MB model's eight slices two at a
// time), each with shardapi.Client.ReadInto, decoded straight into the
// snapshot: a linearizable read on the shard's current leader
// after a Raft barrier, over the shard RPC channel the pushes use. So each
// shard's slice holds every push that shard acknowledged before the read
// began. "Consistent" means exactly that, per shard: the shards are
// independent Raft groups and the read does not stop training, so the
// slices are not one global cut — a worker's iteration in flight may be
// applied on one shard and not yet on another. The snapshot states how
// far apart they are: each shard's t_min, t_max, applied index and
// samples, and the mesh clock, the lowest t_min, below which every live
// worker's iterations are in every slice. The slices differ only by the
// pushes applied between the shards' reads, which run concurrently
// (milliseconds apart on a healthy mesh with a small model); the
// per-shard clocks say by how many iterations.
//
// GET /model.safetensors on any node returns a fresh snapshot
// (modelfile's format; ?timeout= bounds the read, default 30s, 503 with
// the reason on failure); with ?evaluated it returns the snapshot this
// node last evaluated, its accuracy in the metadata (404 on a node that
// has not evaluated, and on the evaluator while its next evaluation reads
// the model into that snapshot's memory: an evaluator holds one copy of
// the model, not two). Both are written straight from the snapshot. A
// model of 32 MiB or more is evaluated in the evaluator's worker's θ,
// borrowed while the worker waits (node/worker/lend.go), and its evaluated snapshot
// is kept in the data dir (evaluated.safetensors), not in memory. `dssp export` and `dssp up`'s report/model.safetensors
// use them.
//
// Checkpoints (--checkpoint-dir, --checkpoint-every, --checkpoint-keep)
// are written by the evaluator alone, from the snapshot it evaluated, at
// the first evaluation at least --checkpoint-every after its previous
// checkpoint (or its start): atomically, the newest --checkpoint-keep
// kept, never one with non-finite parameters or loss (modelfile.
// Checkpoints). Set the flag on every training node: when the evaluator
// dies the next one continues in its own folder.
//
// --init-from FILE (a job flag) makes a bootstrapping node propose the
// file's parameters as every shard's Init; the assembler reads the file
// and checks it against the model's layout before anything is written to
// disk (LoadInitFrom, Deps.InitParams).
//
// # The mesh from any node
//
// [Node.Status] merges what the other members last said (the status room,
// node/status) into what the node knows itself, so /status on any node
// describes every shard and every worker; it never waits on the network.
//
// # Memory
//
// Once the job is known the node sets a soft memory limit for its Go heap
// (--memory-limit, memlimit.go): by default 64 MiB + the dataset's bytes +
// 4.5 × the model's bytes, which keeps the heap near its live size (mostly
// pointer-free float32 slices, cheap to collect) instead of letting it grow
// to twice that between collections. A GOMEMLIMIT in the environment wins.
// Datasets are held as bytes (cudaops), and each shard's raft log and its
// cache are bounded by bytes (shard.Config.LogBytes, raftstore).
//
// # Concurrency
//
// Run owns every goroutine it starts and waits for them before returning.
// [Node.Status] is safe for concurrent use (HTTP handlers, the metrics
// collector); it takes Node.mu for reading and never calls into Raft or
// the network while holding it. Lock order: Node.mu before the rooms' locks (a room never calls back
// into the node while holding its own).
package node
