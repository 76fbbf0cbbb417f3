// Package eval is the evaluation room of a node: model snapshots read
// from every shard's leader ([Room.Read]), GET /model.safetensors
// ([Room.ServeModel]), the snapshot last evaluated, and on the evaluating
// node the evaluation loop ([Room.Run]) and its checkpoints
// ([Checkpointer]), and the evaluations the node holds and receives from
// peers ([Claims]). It gets what it needs through [Deps], [Job],
// [Evaluation] and [ClaimDeps]; it never sees the node.
//
// # Evaluation
//
// The evaluator — the worker the evaluation lease of shard 0 names: the
// lowest id among the workers with a push applied (Deps.Evaluator;
// docs/design.md, "The evaluator") — reads a model snapshot (below) every
// --eval-every, evaluates it on the test set and sends the result to every
// member over the control channel, so every node's /status carries the
// mesh's accuracy; EvalResult.Iter is the snapshot's clock. When the read
// fails (shards electing leaders) the tick is skipped. When the holder's
// worker leaves shard 0's gate (its node dead, its trainer detached) the
// lease names the next at once, which evaluates within 250 ms of hearing
// it (the loop looks at the lease every 250 ms, evaluating every
// --eval-every while it holds it).
//
// Evaluations are ordered by EvalResult.Seq — the samples the shards had
// applied when they were read, summed over the shards, Raft-replicated and
// so agreed by the mesh — never by wall-clock time alone: a peer with a
// fast clock cannot freeze the evaluation shown. An evaluation is accepted
// only from the node it names (the control stream's authenticated peer).
//
// # Claims
//
// [Claims] keeps the evaluation a node holds (and the last [HistorySize]
// for the dashboard's charts), ordered by Seq per evaluator
// ([Claims.Set]). The evaluator's result travels to every member over the
// control channel; a receiver takes one only from the member its own view
// designates as evaluator (the authenticated peer), with a Seq in the
// parameters' domain (at most MaxInt64 and at most ClaimDeps.SeqBound),
// and drops, counts ([Claims.Dropped]) and logs any other
// ([Claims.Receive]). A non-finite loss at evaluation marks the
// evaluation Diverged: the evaluator stops its worker (ClaimDeps.Diverged)
// rather than train on garbage, and every node that receives the claim
// reads the parameters and evaluates them itself
// ([Room.CheckParameters]), in the background, at most one check at a
// time and one per [WarnEvery], stopping its worker only if it sees a
// non-finite value or loss too. The evaluator never checkpoints a
// diverged state: the newest checkpoint is the last good one.
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
// the reason on failure); with ?evaluated it returns the snapshot the
// evaluator last evaluated, its accuracy in the metadata (404 only before
// the first evaluation: the next one reads into a spare copy, and a model
// of LendBytes or more is served from its file). The evaluator
// answers from its own; any other node asks the evaluator over the
// node's control channel (op "evaluated", forward.go) and writes the
// answer through as it arrives: the file in frames of at most 1 MiB, its
// announced size refused beyond the job's model file (4 bytes a parameter
// plus modelfile.MaxHeaderBytes), the whole transfer bounded by the
// request's ?timeout= (default 30s, at most 5 min), each part the
// evaluator sends by 10s and its whole answer by 5 min. The control
// channel is used, not the evaluator's HTTP address, because it is
// authenticated and always reachable between members, where an HTTP
// address may be loopback-only. Every claim carries the SHA-256 of the
// evaluated model file, signed with the evaluator's node key
// (digest.go), and is recorded in shard 0 before the file is served or
// the claim sent (record.go; an evaluation shard 0 does not record is
// dropped); the evaluator sends the claim with the file, and the asking
// node takes it as a broadcast claim, refuses it unless it is the claim
// shard 0 recorded for its sequence (a 502, one ERROR line), hashes the
// bytes as they pass and completes the response only if they match (the
// last part held back until then; a mismatch is cut short and logged at
// ERROR with both digests). Both are written straight from the snapshot. A
// model of 32 MiB or more is evaluated in the evaluator's worker's θ,
// borrowed while the worker waits (node/worker/lend.go), and its evaluated snapshot
// is kept in the data dir (evaluated.safetensors), not in memory. `dssp export` and `dssp up`'s report/model.safetensors
// use them. A download costs a client that does not read a bounded time
// and holds no place while it waits (download.go, [ExportLimits]): each
// 64 KiB within Stall, PerClient and Total downloads at once (a 503 with
// Retry-After beyond), fresh snapshots shared by the requests within
// FreshFor of their read, at most Concurrent held.
//
// Checkpoints (--checkpoint-dir, --checkpoint-every, --checkpoint-keep)
// are written by the evaluator alone, from the snapshot it evaluated, at
// the first evaluation at least --checkpoint-every after its previous
// checkpoint (or its start): atomically, the newest --checkpoint-keep
// kept, never one with non-finite parameters or loss (modelfile.
// Checkpoints). Set the flag on every training node: when the evaluator
// dies the next one continues in its own folder.
//
// # Concurrency
//
// [Room.Run] is one goroutine. Read, ServeModel and Latest are safe for
// concurrent use: one read runs at a time (the shard clients are not safe
// for concurrent use), waiting for its turn within the caller's deadline;
// the evaluated snapshot is guarded by its own lock, held for reading
// while an export streams it. [Claims] is safe for concurrent use; its
// lock is innermost, held across no call of [ClaimDeps] (whose Diverged
// and SeqBound take the node's lock).
package eval
