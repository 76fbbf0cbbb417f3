// Package join is how a node finds the mesh through seeds: [Resolve] turns
// --join entries into gossip addresses (a host name to every address it
// names, this node's own addresses dropped), and [Join] runs one join of
// the mesh through them, telling its operator how it goes while no seed
// answers — which seeds, which attempt, why the last failed — and, for a
// --join seed that accepted a connection but did not speak gossip, that it
// answers HTTP (a node's --http-addr port given instead of its gossip
// port). The join itself is the caller's (mesh.Membership.Join); this
// package only watches it through mesh.WithJoinTrace.
//
// [Join.Run] blocks until the join ends or its Timeout passes, on the
// caller's goroutine; its trace callback runs on memberlist's and is
// guarded by Join's one mutex. Time is injected (Join.After).
package join
