// Package shards is the shard manager room of a node: this node's
// replicas of the job's shards and their upkeep. It gets what it needs
// through [Deps] (the [Replicas] that open them, membership, the observer,
// the event record, where to persist peers) and [Config] (the job's shape
// and every shard's spec); it never sees the node.
//
// A shard manager follows membership: every node runs a
// replica of each shard whose placement (mesh.Place over the live members)
// includes it, the leader of each shard reconciles the Raft configuration
// toward the placement, and removes from the shard's clock table every
// worker that membership declares failed or that leaves. A replica this
// node no longer places is shut down once the leader has removed it: by
// its own configuration, or by the leader's word in the node's mesh view
// (Deps.PeerLeader) — raft stops replicating to a removed server, so a
// follower often never hears of its own removal and would pre-vote for
// ever (Manager.removed). A replica whose raft stopped itself (raft stops
// a server that commits its own removal) is closed, and reopened from its
// stores where placement still names this node, for the leader to add
// back (Manager.reopenStopped).
// When a shard's slice exceeds 1 MiB, the worker and the evaluation loop
// start only once every shard's voters are its placement, or after 3
// minutes (trainstart.go): otherwise every push of a
// fresh mesh lands on the bootstrap node while it ships the snapshots.
//
// A replica that cannot start fails [Manager.Start], and with it the
// node's start (a node's assembly checks every shard store before that:
// one damaged store refuses the whole start). A replica placed here later
// that cannot start (a store damaged while the node ran) does not stop
// the node: it is logged at error and recorded as a replica-refused event
// once per distinct reason, shown in its shard's status (Refused: the
// file, the problem and the remedy), and tried again each round, so it
// starts once the operator has removed the shard folder.
//
// A replica that opens here with no state of its own is followed until it
// is caught up (heal.go): each step is an event of kind heal and an INFO
// line (opened, state received with its bytes and rate, caught up).
//
// A replica's raft streams are let in from the members of its latest
// configuration and from the peers placement assigns to its shard
// (ReplicaHooks.AllowRaftPeer). A leader outside the placement therefore
// hands its leadership to a voter in it before it changes the
// configuration (shard.Replica.Reconcile): a replica placed again after
// its node was cut off or stopped may hold a configuration from before
// that leader joined, knows the leader in neither, and refuses it, so a
// leader outside the placement that adds it waits for its catch-up for
// ever; a leader in the placement is let in by every replica placed.
//
// Placement (placement.go) is mesh.PlaceAll over the live members, cached
// until they change. Every 300 ms [Manager.Run] starts the replicas placed
// here, and on each shard this node leads removes gone workers, starts one
// reconcile step toward the placement (cancelled when the placement
// changes under it) and hands a leadership over to spread leaders across
// the members and keep each near a quorum of its voters by measured round
// trip (Deps.RTT; leadMove in manager.go).
//
// [Manager.Identities] is the union of the identity state (revoked ids,
// pinned keys of legacy ids) of the replicas hosted here, with the legacy
// ids two shards pinned to different keys; [Manager.PinLeading] proposes
// a pin on the shards this node leads.
//
// # Concurrency
//
// [Manager.Run] is one goroutine; each reconcile step and leadership
// transfer runs in one of its own. Every method is safe for concurrent
// use. Manager.mu guards the replicas and the reconcile steps and is never
// held across a Raft call.
package shards
