// Package job is a mesh's training job: the [Spec] the bootstrap node sets
// from its flags, every joiner adopts from the mesh (refusing an explicit
// flag that disagrees: [ConflictError]) and every node persists in its
// data directory ([Marshal], [Unmarshal]); its defaults ([DefaultSpec]),
// its validation, its flags ([Spec.BindFlags]) and what the shards and
// the worker read from it (policy, optimizer, wire precision, shards,
// local rounds), and the initial parameters of --init-from
// ([LoadInitFrom]; for an external job [LoadExternalInitFrom]).
//
// # Local rounds
//
// --local-steps H > 1 (rounds.go) makes each push a round of H local
// steps: the workers run the inner optimizer ([Spec.Inner]: sgd at 6 × --lr, 0.3 by default, or
// adam at 0.001 unless --inner-lr) and the shards the outer one
// ([Spec.Outer]: Delayed Nesterov at 0.7 with momentum 0.9, DiLoCo's, or
// --outer-optimizer sgd at 1, the models' average). A zero field is its
// default, resolved when read, so a spec persisted before local rounds
// reads as H = 1, and a joiner's explicit flag is compared with the
// mesh's resolved value. The outer and inner flags need H > 1 (a round of
// one step would be a gradient step under another name); with --pipeline
// the next round's first steps overlap the push (node/worker);
// --batch × H is at most shardapi.MaxBatch samples a round.
//
// # Replication
//
// --replication is the Raft voters per shard, one of 1, 3, 5, 7. A shard
// commits and elects with a majority of its voters, so r voters survive
// (r−1)/2 failures: an even r is refused with that reason, since it
// survives no more failures than r−1 at more cost, and 2 survives none
// (one kill freezes the shard; issue 38). 1 is accepted, with a WARN at
// start ([Spec.ReplicationWarning]): it is no replication by name, for a
// try on one machine or a measure of the unreplicated path, and nobody
// reads it as fault tolerance the way 2 was read. While the mesh has
// fewer live members than r, every shard has fewer voters; node/status
// warns about that and names a shard that lost its quorum.
//
// It sits below node and its rooms and holds values only: nothing here
// starts a goroutine or takes a lock; a Spec is copied, never shared.
package job
