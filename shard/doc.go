// Package shard holds one Raft-replicated parameter shard: its state
// machine, the leader's push service that withholds replies as the gate
// says, and replica reconciliation toward a placement. The mechanics are
// in docs/design.md, "Shards and Raft" and "Inside a shard".
//
// # What it owns
//
//   - [FSM], the raft.FSM: a router over sub-machines (state.go) — the
//     parameters with the optimizer and the outer rule, the gate with its
//     dedupe table, the tally, shard 0's balancer, the identities, the
//     agreement check (agreement.go), shard 0's evaluation claims
//     (claims.go). Apply
//     decodes an entry (entry.go), hands it to its kind's applier
//     (apply.go, pushapply.go), hashes and observes. Each sub-machine has
//     its own apply, its own snapshot section and no reference to another.
//   - [Replica]: one node's member of the shard's raft group (member.go)
//     and, while it leads, the push service on mesh.Channel{KindRPC,
//     shard}; it answers what a node asks of the group without exposing
//     raft (Configuration, TransferLeadership, LeaderChanged, Read,
//     Reconcile, Revoke).
//
// # Guarantees
//
// Apply is deterministic: the receipt time of every push is in its entry,
// the learning rate is a function of the global samples applied, the FSM
// never reads a clock; [FSM.StateHash], SHA-256 of the snapshot's bytes,
// is equal on replicas that applied the same entries, and snapshots of
// earlier builds restore to their hash (testdata/snapshots). Replicas
// prove it while they run (docs/design.md, "Replicas agree"): a replica
// whose state digest differs from the one a majority of the voters sent,
// or whose log store finds an entry damaged, stops raft (no vote, no
// service), says so once (Deps.OnDiverged, one ERROR line) and, once the
// leader has evicted it, tells its node (Deps.OnEvicted) to rebuild it. A push
// (worker, iter) is applied once, at the worker's clock; it is
// acknowledged only after its entry is applied, and never while the gate
// holds it. A rejection ([*shardapi.RejectError]) changed nothing; a lost
// reply is ambiguous and the client resends the same (worker, iter).
// Input from a peer or another replica (frames, entries, snapshots) is
// bounded and never panics the process.
//
// # Adding a sub-machine
//
// A new replicated feature is a sub-machine, not FSM methods: a type in its
// own file with its apply and its section (state.go), a field of state,
// its section last in state.sections (writing nothing while empty), a
// follower if it follows the gate, an entry kind and applier (apply.go) if
// entries drive it, and a golden transcript (docs/design.md, "Sub-machines").
// A replica-local part beside replicated state (the agreement check's
// digests and verdict) is a type the FSM holds and calls under its lock
// (localcheck.go), read through one copied view (FSM.check).
//
// # Concurrency
//
// raft calls FSM.Apply, Snapshot and Restore (never two Applies at once);
// readers take the FSM's read lock (FSM.read). The leader's push service is
// three stages with their own goroutines and locks, a push being one ticket
// from receipt to reply: intake (intake.go), proposer (proposer.go),
// replier (replier.go), beside the suspector, the agreement checker
// (checker.go) and the leadership watcher.
// Replica methods are safe for concurrent use; Apply never takes a stage's
// lock. Lock order: replier.mu → FSM.mu → the reply cache's mu;
// suspector.mu → intake.mu; FSM.Snapshot waits on snapshotMem first.
//
// Ownership: the parameters a push returns are the caller's; an OK's
// encoding is shared read-only by the replies at one applied index; entry
// payloads are not retained. Time: receipt times and the batch linger come
// from the injected [WallClock]; raft's timers and keep-alives run on real
// time.
package shard
