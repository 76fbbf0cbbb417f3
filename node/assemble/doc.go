// Package assemble builds a node's real edges for node.Run: the data
// directory, the debug history, the HTTP listener, the QUIC transport,
// memberlist gossip, and shard replicas over raft and bbolt. It is where
// a node meets sockets, files and raft, so that package node depends only
// on interfaces (mesh.Transport, mesh.Membership, shards.Replicas) and
// never on raft.
//
// [Node] opens everything in order and, on an error, closes what it had
// opened. It checks every shard store in the data dir
// (raftstore.CheckShards) before it binds a port: one damaged store
// refuses the node's whole start with a *raftstore.DamagedError naming
// the file, the problem and the remedy; the error of a socket that cannot be bound names the flag that
// sets its address. [RaftReplicas] is the shards.Replicas of every node;
// tests give it mesh's in-memory transport.
//
// Concurrency: RaftReplicas is safe for concurrent use; Node is called
// once per process.
package assemble
