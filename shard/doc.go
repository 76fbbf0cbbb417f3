// Package shard holds one Raft-replicated parameter shard: its state
// machine (parameters, optimizer state, the clock gate, dedupe), the
// leader's push service that withholds replies as the gate says, the
// worker-side client, and replica reconciliation toward a placement.
//
// # What it owns
//
//   - [FSM]: the raft.FSM of docs/design.md#shards-and-raft. Entries (kinds
//     Init, Push — a batch of pushes, the first of them possibly a group
//     whose gradients the leader summed into one (aggregate.go), applied
//     all or nothing, a group not applied being proposed again by the
//     leader —, AddWorker, RemoveWorker, SuspendWorker, Identity) are a tag
//     byte, a msgpack header and raw tensor bytes in shardapi's codec
//     (shardapi/tensor.go; entry.go has the layout); headers of entries and snapshots are decoded with
//     internal/boundedmsgpack, as they are input from another replica. Apply is deterministic: the receipt time of every push is in
//     the entry, gradients of one entry are summed into one optimizer step
//     whose learning rate is a function of the global samples applied before
//     it ([shardapi.Schedule]), and the FSM never reads the clock. Snapshots encode
//     everything (snapshot.go); [FSM.StateHash] is a SHA-256 of that
//     encoding, equal on replicas that applied the same entries. A
//     snapshot takes θ and the velocity without copying them: until it has
//     written them (Persist) the FSM is frozen and an Apply steps a copy
//     instead, so the snapshot's bytes are the state at its index.
//   - The balance layer (balance.go, docs/design.md#balance), with
//     Spec.BalanceBase > 0: every shard weights a push's gradient by its
//     samples / BalanceBase before summing (not a pseudo-gradient under
//     an outer rule: shardapi.Spec.Weighted); shard 0's FSM also holds a
//     balance.Balancer fed by the applied pushes' samples and compute_ns
//     and the gate's membership, deciding when t_min rises, and keeps the
//     allocations in force as versions. Its OK to push (w, iter) carries
//     w's [shardapi.Assignment] for iteration iter+1 (read under the FSM's
//     read lock after the reply's parameters; a later decision is in force
//     only from t_max+1, so both reads agree; t_max as high as it has
//     been, as a removal lowers the gate's max but not the iterations whose
//     shares were named). With Spec.Pipeline the gate
//     releases by Spec.GatePolicy (s_L − 1), new allocations are in force
//     from t_max+2 and the OK also carries iter+2's (Reply.Ahead): both are
//     final once push iter is applied.
//   - Local rounds (outer.go, docs/design.md#local-rounds), with a
//     non-zero Spec.Outer: a push carries a round's pseudo-gradient and
//     the entry's sum is applied by the outer rule (sgd: θ −= LR·S/N;
//     Delayed Nesterov: the same at once, and the momentum once per N
//     arrivals, N the gate's workers) instead of Spec.Optimizer's step.
//     Its state — the momentum (in the velocity's place; within a momentum
//     period the next momentum being formed, μ·m plus the period's
//     pseudo-gradients ÷ N, so no buffer of them is kept) and the count of
//     arrivals since the last momentum step — is in the snapshot (the
//     count in the header, bounded by maxArrivals; a version-1 snapshot's
//     buffer is folded into the momentum as it is read) and checked like
//     θ: a step that would leave any of it non-finite or at ±2^64 is
//     refused, exactly, before the gate sees the push. A zero Spec.Outer
//     (every job of one local step) steps exactly as before local rounds.
//   - [Replica]: one node's member of the shard's raft group plus the push
//     service on mesh.Channel{KindRPC, shard}. It answers what a node asks
//     of the group without exposing raft: [Replica.Configuration] (voters
//     and non-voters), [Replica.TransferLeadership], and leadership changes
//     through [Replica.LeaderChanged] and Deps.OnLeader. Its raft transport
//     is raftstore.NewMeshTransport on a node, raft's in-memory one in tests.
//     Its log is bounded by bytes, not only by entry counts: the replica
//     measures the entries it stores and keeps raft's SnapshotThreshold and
//     TrailingLogs at Config.LogBytes and Config.TrailingBytes over the
//     mean entry (logbudget.go), so the log and its bbolt file stay a few
//     megabytes whether an entry is a quarter of a megabyte or tens.
//   - [shardapi.Client]: a worker's push-and-pull to one shard (in
//     package shardapi with the RPC protocol, errors, [shardapi.Spec] and the
//     reports, so that node can use them without raft).
//   - [Replica.Read] and [shardapi.Client.ReadInto]: a linearizable read of the shard's
//     parameters and clocks (see Reads).
//   - [Replica.Reconcile]: moves the raft configuration toward a desired
//     replica set, one change at a time, adding before removing; a leader
//     outside the set first hands its leadership to a voter inside it
//     (a replica whose configuration is stale lets in only the members of
//     that configuration and the peers Deps.AllowRaftPeer vouches for, so
//     it may never hear a leader outside the set).
//
// # Pushes, exactly once
//
// A push is identified by (worker, iter). The FSM applies it only when iter
// equals the worker's clock in the gate; an older iter is a duplicate and is
// not applied again (the gate's clock is the dedupe table: it is the last
// applied iteration + 1). The leader acknowledges (OK + the current
// parameter slice) only after the entry holding the push is committed and
// applied, and only while the gate does not hold the worker: the reply for
// (w, iter) is sent when w is known, its clock is past iter, and the gate is
// not holding w's push iter. The same predicate answers a fresh push, a
// resend of an applied one (dedupe) and a held push re-examined after every
// later Apply, so a new leader that receives a resend after failover
// replies at once if the gate released it and holds it otherwise; no OK is
// ever sent while the gate holds the push (no OK for a gap above s_U).
//
// A push is one [shardapi.Push] given to [shardapi.Client.Push], which
// returns one [shardapi.PushReply]. On the wire it is a [shardapi.Request]
// frame with the encoded gradient as payload, answered by [shardapi.Reply]
// frames (Held and Pending keep-alives, then one final reply). In the
// replica it is one [Push] from receipt to apply: the leader's service
// queues it with the stream its reply goes to, a push entry's header
// lists it (entry.go), and the FSM applies it and reports a
// [shardapi.PushResult] in its [shardapi.Applied].
//
// Ambiguity: a push whose reply was lost (stream broke, leader died,
// NotLeader after proposing, timeout) may or may not have been applied.
// The [shardapi.Client] resends the same (worker, iter) to whichever
// replica leads, and a caller whose Push returned such an error resends
// the same (worker, iter) later; the dedupe makes that safe, and a resend
// of an applied push is answered from the state. Rejections are not
// ambiguous: a push refused with a [*shardapi.RejectError] changed nothing and
// resending it is pointless.
//
// Rejected input is refused with a [*shardapi.RejectError] naming the [shardapi.Reason],
// counted, and leaves the shard unchanged. One function (checkPush,
// validate.go) holds the rules of a push's fields and length — a worker
// named, no negative iteration, samples or compute time, the shard's
// gradient length, and the job's bounds — and the leader's service (before
// proposing) and the FSM (each push, alone or in a summed group) both
// apply it, with the same reasons. Beyond it: NaN/Inf in the gradient (the
// leader's scan, the FSM's decode), an unknown worker, an iteration from
// the future, a push while the previous one is held, a shard not
// initialised. Bad frames from a peer close that stream only.
//
// # Replicated state stays in its domain
//
// Every field of a push that reaches the FSM is bounded by constants or by
// the replicated spec, so every replica decides alike
// ([shardapi.ReasonOutOfBounds]): samples at most Spec.MaxPushSamples
// (the job's batch, Spec.Batch, or [shardapi.MaxBatch], 65 536, the bound
// of any job's batch, for a spec that names none; under the balance layer,
// which may give one worker up to the global batch of the job's batch ×
// the workers present, [shardapi.MaxBalanceWorkers] (256) × BalanceBase),
// an iteration — and an
// AddWorker's clock — at most [shardapi.MaxIter] (2^40), a compute time at
// most [shardapi.MaxComputeNs] (a day), and no gradient on a push of no
// samples (a join's fetch carries zeros). Every replicated counter
// saturates instead of wrapping (saturate.go): the global samples, pushes,
// duplicates and rejections, and balance's data positions. The schedule's
// rate ([shardapi.Schedule.Rate]) is finite and in [0, LR] for every count:
// a negative count reads as 0, and a rate that decays below float32's
// smallest value is 0 (the steps then leave θ as it is), the end of the
// schedule, not an error; Init refuses an LR that float32 cannot hold.
//
// The outlier rule (hygiene.go), on by default: the leader refuses a push
// whose norm — of the gradient the FSM applies, ‖g‖ × samples /
// BalanceBase under the balance layer — exceeds Spec.Outlier (the spec's
// OutlierFactor, [shardapi.DefaultOutlierFactor] = 100 when it names none;
// it cannot be turned off) times the median of the last 64 non-zero norms
// it accepted, once it holds 16 ([shardapi.ReasonOutlier]). Recorded
// honest runs reach 5.2× the median on MNIST and 28× on synthetic-mnist
// converged (TestOutlierRuleRefusesNoHonestPush; docs/design.md). A
// round's pseudo-gradient (Spec.Outer on) of norm at most 1e-3 × ‖θ‖ of
// the slice is no outlier whatever the median: converged rounds spread
// past any factor at norms far below that (TestOutlierRuleRefusesNoHonestRound).
// The window is the leader's own: a new leader checks nothing until its
// first 16 pushes have set the scale, and a push at the factor is applied,
// so one member's pull on the parameters is bounded a push, not removed.
//
// # Revoked nodes and pinned keys
//
// Every shard's log also orders its identity state (identity.go,
// [shardapi.Identities]): the node ids an operator revoked and the key
// pinned for each legacy node id (trust on first use; first pin wins, a
// pin of another key is refused). A revocation ([Replica.Revoke], or
// [shardapi.OpRevoke] from any member, whose node relays the operator's
// request) removes the node's worker from the gate, releasing the workers
// it held back, and every replica refuses its later pushes — alone or in
// a summed group — and add-workers with [shardapi.ReasonNotPeer] ("node
// … is revoked"). Both tables are bounded ([shardapi.MaxIdentities]) and
// kept in snapshots (absent when empty, so a shard that never saw one
// writes the bytes of earlier builds); nodes read them with
// [Replica.Identities].
//
// # Every peer acts only as itself; parameters stay finite
//
// A push, add-worker or remove-worker request must name as its worker the
// node the stream's TLS certificate authenticates (mesh.Stream.Peer), or it
// is refused with [shardapi.ReasonNotPeer]. Before proposing a push the leader
// refuses a gradient holding NaN or ±Inf ([shardapi.ReasonNonFinite]), a
// gradient on a push of no samples, and one whose norm exceeds the outlier
// factor times the median of the shard's recent norms
// ([shardapi.ReasonOutlier], above); it counts them per
// worker ([shardapi.ServiceStats].Refused, with the streak that marks a worker
// that keeps sending them). The FSM checks again, deterministically, so a
// replica never applies a non-finite entry whoever wrote it: a NaN/Inf
// gradient, and a push whose optimizer step would make a parameter or
// velocity non-finite or bring it to ±2^64, whose square float32 cannot
// hold ([shardapi.ReasonNonFiniteStep], computed with the step's own
// float32 arithmetic), are refused alike on every replica; Init and
// snapshots with non-finite parameters are refused. Restore reads at most
// the snapshot its header describes plus one byte, and refuses a longer
// one.
//
// Raft traffic comes only from the shard's members: the replica tells its
// raftstore transport to refuse raft streams from peers outside its latest
// configuration, unless it has none yet (joining) or Deps.AllowRaftPeer
// vouches for the peer (the node: placement assigns it to the shard). A
// worker stream's payload is limited to the shard's gradient size, and a
// stream silent for Config.IdleStreamTimeout while none of its pushes is
// held is closed (the client reopens one). A reply waits at most
// Config.ReplyWriteTimeout (plus its frame's time at
// shardapi.MinReplyRate) for its worker to read it, and a stream that ends
// or a replica that stops cuts a write in progress: a worker that keeps a
// stream open without reading it holds neither the goroutine that answers
// the shard's released pushes nor Shutdown.
//
// # Reads
//
// A read (op read on the shard's RPC channel, [shardapi.Client.ReadInto]) is answered
// only by the leader, after a Raft barrier: the barrier commits through a
// quorum, so a deposed leader cannot answer, and it returns once every
// earlier entry is applied, so the slice holds every push acknowledged
// before the read began. The reply carries the slice with t_min, t_max,
// the applied index and the samples applied. A read changes nothing (the
// barrier is not an FSM entry) and is retried freely; a shard without Init
// yet answers it with a rejection (ErrNotInitialized at the client).
//
// # Suspected workers
//
// The leader suspends a worker that holds others back and has gone silent
// and disconnected (suspect.go has the rule, [SuspectPolicy] the knobs):
// a suspend entry, applied on every replica as a RemoveWorker only if the
// worker is still at the clock the leader saw and still at t_min with
// nothing held and someone held behind it, else as nothing. A suspended
// worker that was alive after all comes back through AddWorker at or past
// the clock it had. One goroutine (the suspector) checks every
// SuspectPolicy.Check while the replica leads and proposes one entry per
// worker at a time.
//
// # Held replies
//
// While a push is held the leader sends a Held frame on the worker's stream
// every Config.HeldKeepAlive, so a client can tell a slow gate from a dead
// leader by a read deadline. At the first keep-alive after the replica
// lost leadership every held request is answered NotLeader instead, so its
// worker moves to the new leader. Likewise, while a push is queued or its
// entry is in flight (proposed, not yet applied) the leading replica sends
// a Pending frame every HeldKeepAlive: an entry of tens of megabytes (a
// 100 MB model's slice) can take longer than the client's ReplyTimeout to
// commit on a loaded machine, and silence would have the client resend it.
// When a worker is removed its own held push is answered with a
// [*shardapi.RejectError] of [shardapi.ReasonUnknownWorker]; the pushes of others it was
// holding back are released.
//
// # Concurrency and goroutines
//
// raft calls FSM.Apply, Snapshot and Restore on its own goroutines (never
// two Applies at once); readers (status, state hash, the service's reply
// builder) take the FSM's RWMutex for reading. A Replica runs: an accept
// loop, one reader goroutine per worker stream, one proposer that batches
// queued pushes into entries, one completer that waits on futures in order,
// one evaluator that re-examines held replies after each Apply and sends
// the keep-alives, Held and Pending (and answers held pushes NotLeader as soon as the
// replica is deposed), one suspector (suspect.go), one leadership watcher
// that calls Deps.OnLeader and then wakes LeaderChanged waiters, one
// goroutine per add- or remove-worker request or suspension while its
// entry is proposed, and one per regrouped push until the proposer's queue
// takes it. An OpStatus request is answered by any replica with
// its applied index, the leader it knows and its term (status.go): the
// probe a worker's client sends when its leader goes silent. Sends on a stream are serialised by
// that stream's mutex. Replica methods are safe for concurrent use; a
// Client is not (one per shard per worker; a worker pushes to all shards
// concurrently with one Client each).
//
// Lock order: service.mu → workerConn.sendMu; service.mu → FSM.mu →
// FSM.enc.mu (the reply encoding cache, built under the read lock).
// FSM.Snapshot waits on snapshotMem (scratch.go) before FSM.mu; a
// snapshot's Persist takes FSM.mu only to unfreeze, after writing.
// FSM.Apply never takes a service lock: it signals the evaluator through a
// one-slot channel.
//
// Slices: a parameter slice a push returns ([shardapi.PushReply].Params) is
// owned by the caller (it is the Push's Into, or freshly allocated). Entry payloads
// decoded by the FSM are not retained. The float32 scratch of a push
// entry's Apply (its decoded gradient and, from a second push on, the
// running sum) is borrowed from one process-wide bounded free list
// (scratch.go, a leaf lock) and given back when the Apply ends, so a replica holds θ and the velocity between
// Applies and nothing of a slice's size besides. The parameters an OK reply carries
// are encoded once per applied index and shared, read-only, by every reply
// at that index (no copy of θ per reply).
//
// Time: receipt times, the only time that enters the replicated state, come
// from the injected [WallClock] (Deps.Clock), and so does the proposer's
// batch linger (Config.BatchLinger: a batch holding fewer pushes than the
// shard has workers waits that long for the others). Everything else runs on real
// time: raft's timers, the client's backoff and read deadlines, the
// keep-alive ticker.
package shard
