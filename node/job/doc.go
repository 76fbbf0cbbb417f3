// Package job is a mesh's training job: the [Spec] the bootstrap node sets
// from its flags, every joiner adopts from the mesh (refusing an explicit
// flag that disagrees: [ConflictError]) and every node persists in its
// data directory ([Marshal], [Unmarshal]); its defaults ([DefaultSpec]),
// its validation, its flags ([Spec.BindFlags]) and what the shards and
// the worker read from it (policy, optimizer, wire precision, shards).
//
// It sits below node and its rooms and holds values only: nothing here
// starts a goroutine or takes a lock; a Spec is copied, never shared.
package job
