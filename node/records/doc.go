// Package records holds the records a node's rooms hand each other and
// the outside: the status of a shard, of a clock table's worker and of
// this node's worker loop (served in /status and told to peers), the
// events of the mesh a node records, the version of each slice a worker
// computes on, and the [Observer] the debug history implements.
//
// It sits below node and its rooms (node/worker, node/shards,
// node/status): each room imports it, none imports another room, and node
// imports them all. It holds types only; nothing here starts a goroutine
// or takes a lock. The JSON tags are /status's shape, which the dashboard,
// `dssp status` and the fault suite read: change a tag only with them.
package records
