// Package shard holds one Raft-replicated parameter shard: its state
// machine, the leader's push service that withholds replies as the gate
// says, and replica reconciliation toward a placement. The mechanics are
// in docs/design.md, "Shards and Raft" and "Inside a shard".
//
// # What it owns
//
//   - [FSM], the raft.FSM: a router over sub-machines (state.go) — the
//     parameters with the optimizer and the outer rule (params.go), the
//     gate with its dedupe table (gate.go), the tally of what was applied
//     and refused (tally.go), shard 0's balancer (balance.go) and the
//     revoked ids and pinned keys (identity.go). Apply decodes an entry
//     (entry.go), hands it to its kind's applier (apply.go; pushapply.go
//     sequences a push through the machines), hashes the state when asked
//     and shows the observer. Each sub-machine has its own apply, its own
//     section of the snapshot (snapshot.go) and no reference to another or
//     to the FSM.
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
// earlier builds restore to their hash (testdata/snapshots). A push
// (worker, iter) is applied once, at the worker's clock; it is
// acknowledged only after its entry is applied, and never while the gate
// holds it. A rejection ([*shardapi.RejectError]) changed nothing; a lost
// reply is ambiguous and the client resends the same (worker, iter).
// Input from a peer or another replica (frames, entries, snapshots) is
// bounded and never panics the process.
//
// # Adding a sub-machine
//
// A new replicated feature is a sub-machine, not FSM methods: (1) a type
// in its own file with its apply and its section (save, load: state.go's
// section), reading nothing of the FSM; (2) a field of state and its
// section at the end of state.sections, writing nothing while it is empty
// so that earlier states keep their bytes and hashes (a later change of
// its encoding bumps its version: header.setVersion); (3) if it follows
// the gate, a follower in state.followers; (4) if entries drive it, an
// entry kind in entry.go and its applier in apply.go's appliers; (5) a
// golden transcript, testdata/golden/*.txt (go test ./shard -run Golden
// -rewrite).
//
// # Concurrency
//
// raft calls FSM.Apply, Snapshot and Restore on its own goroutines (never
// two Applies at once); readers take the FSM's RWMutex for reading
// (FSM.read). A snapshot shares θ with the FSM until it has written it;
// an Apply meanwhile steps a copy. The leader's push service is three
// stages, each with its own goroutines and lock, a push being one ticket
// (conn.go) from receipt to reply: intake (intake.go: accept, one reader
// per worker stream, check), proposer (proposer.go: batch, group,
// propose, complete in order, regroup) and replier (replier.go: settle,
// decide, answer, hold, keep-alives); beside them the suspector
// (suspect.go) and the leadership watcher. Replica methods are safe for
// concurrent use; FSM.Apply never takes a stage's lock (it signals the
// replier through a one-slot channel). Lock order: replier.mu → FSM.mu →
// the reply cache's mu; suspector.mu → intake.mu; a stream's send lock
// alone; FSM.Snapshot waits on snapshotMem before FSM.mu.
//
// Ownership: the parameters a push returns are the caller's; an OK's
// encoding is shared read-only by the replies at one applied index; entry
// payloads are not retained. Time: receipt times and the batch linger come
// from the injected [WallClock]; raft's timers and keep-alives run on real
// time.
package shard
