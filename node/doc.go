// Package node is one dssp process: its configuration and job spec; its lifecycle (bootstrap a mesh or join one by seed, leave
// gracefully, recover after a crash) and the control channel. It starts
// and stops four rooms below it, each built from an explicit Deps and
// none holding the Node: node/worker (the worker loop), node/shards (the
// shard manager: replicas, placement, reconcile), node/status (what a
// node shows: /status, /metrics, the dashboard, events, the mesh view,
// the debug history) and node/eval (model snapshots, the evaluation,
// checkpoints), with the records they share in node/records and the job
// spec in node/job; joining through seeds is node/join and the data
// directory node/datadir (node keeps aliases such as [JobSpec], [Status]
// and [DataDir] for its callers). No room imports node or another room (repo_test.go's
// mayImport), and inside node and each room no file-to-file arrow goes
// back up (rooms_test.go).
//
// A node started with --train=false only hosts shards: it loads the model
// (for its size and initial θ) but no dataset and runs no worker.
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
//     joins (node/join: while no seed answers it logs so every few
//     seconds, with the attempt and its error, and names a --join seed
//     that answers HTTP: the --http-addr port given for the gossip port;
//     the error after --join-timeout names the seeds and the last
//     failure), fetches the job spec from a member over the control channel
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
// # External trainers
//
// With --trainer external (external.go) the node computes no gradient
// itself: it serves the trainer socket of node/trainer in its data dir
// and runs its worker, on node/trainer.External, only while a trainer is
// attached; a trainer that goes is a worker that left (removed from every
// shard at once), one that attaches again is re-added. A --model external
// job's layout is fixed on the bootstrap node by its first trainer (or
// --init-from) before the shards are created, and travels in the job
// spec; its evaluator's trainer evaluates (docs/design.md, "External
// trainers").
//
// # Evaluation and model snapshots
//
// The evaluation room (node/eval) reads model snapshots, serves
// GET /model.safetensors, and on the evaluator evaluates and checkpoints;
// the node keeps the evaluation it holds ([EvalResult], ordered by Seq
// per evaluator) and sends the evaluator's to every member over the
// control channel; a receiver takes one only from the member its own view
// designates as evaluator (the authenticated peer), with a Seq in the
// parameters' domain, and drops, counts and logs any other. The channel
// also carries the evaluated model to a node asked for it that is
// not the evaluator (control op "evaluated", node/eval's forward.go).
// --init-from FILE (a job flag) makes a bootstrapping node propose the
// file's parameters as every shard's Init; the assembler reads the file
// and checks it against the model's layout before anything is written to
// disk (LoadInitFrom, Deps.InitParams).
//
// # Bad gradients and a diverging job
//
// A gradient the shards refuse (NaN/Inf, a norm outlier under
// --outlier-factor, a step that would make a parameter non-finite) is
// logged, counted (LocalWorker.Refused, worker_gradients_refused_total) and
// replaced by the worker (node/worker). Shard leaders count refusals per
// worker (Status.Refusals, with the repeat offenders, and
// dssp_shard_gradients_refused_total). A non-finite
// loss at evaluation marks the evaluation Diverged; the evaluator stops its
// worker with a message saying so (LocalWorker.Stopped) rather than train
// on garbage, and every node that receives the claim reads the parameters
// and evaluates them itself (eval.go: checkDiverged), stopping its worker
// only if it sees a non-finite value or loss too; a node that stopped says
// why (phase diverged, Status.Stopped). A stopped worker leaves the shards'
// gates (node/worker, "Stopping"): a node that trains on is not held behind
// it. The shards keep their last parameters,
// which the FSM guarantees finite, and the evaluator never checkpoints a
// diverged state: the newest checkpoint is the last good one.
//
// --insecure is shown in /status (insecure), /metrics (dssp_insecure) and
// the dashboard.
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
// 4.5 × the model's bytes (2.5 × more with local rounds: the round's copy of
// θ, the outer buffer and its snapshot copy), which keeps the heap near its live size (mostly
// pointer-free float32 slices, cheap to collect) instead of letting it grow
// to twice that between collections. A GOMEMLIMIT in the environment wins.
// Datasets are held as bytes (cudaops), and each shard's raft log and its
// cache are bounded by bytes (shard.Config.LogBytes, raftstore).
//
// # Identity and revocation
//
// The node's id and key pair live in its data dir (node/datadir; a fresh
// id is derived from the key, mesh.DeriveID). Its identity view
// (identity.go) holds the ids revoked and the key pinned for each legacy
// id (an earlier build's random id: the first key this node or a shard
// leader saw it with): the union of its replicas' replicated state
// (node/shards Manager.Identities, merged every second by revoke.go),
// its own first sightings (proposed as pins on the shards it leads) and
// its data dir's record (identities.json). The view refuses peers in
// every handshake of the transport (mesh.PeerCheck) and in memberlist's
// alive messages, and the node's membership view (n.members) leaves
// revoked nodes out, so placement, the evaluator and /status never count
// one. An operator revokes an id with POST /revoke (dssp revoke), whose
// HMAC under the mesh key's operator key is checked by Deps.VerifyOperator
// ([Node.Revoke]): the node refuses the id, relays the request to every
// other member over the control channel (op "revoke": each checks the MAC
// itself) so a revoked shard leader loses its followers, and asks every
// shard's group to apply it (shardapi.Client.Revoke). The mesh view each
// node asks its peers for every second (op "view") carries the
// revocations it holds with their MACs, and the asking node takes those
// whose MAC it checks, so a node that joins later and hosts no replica
// learns them too. /status lists the
// revoked ids (revoked), the pinned keys' count and the conflicting
// legacy ids.
//
// # Concurrency
//
// Run owns every goroutine it starts and waits for them before returning.
// [Node.Status] is safe for concurrent use (HTTP handlers, the metrics
// collector); it takes Node.mu for reading and never calls into Raft or
// the network while holding it. Lock order: Node.mu before the rooms'
// locks; a room never calls back into the node while holding its own.
package node
