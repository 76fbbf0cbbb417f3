// Package raftstore provides what hashicorp/raft needs from dssp for each
// parameter shard: a log store and a stable store (raft-wal on disk), a
// snapshot store (raft's file snapshot store), an in-memory twin of all
// three for tests, an hclog bridge so raft logs through the node's
// *slog.Logger, and a raft.StreamLayer over the mesh's QUIC Raft streams.
//
// # Layout on disk
//
// Each shard owns one folder under the node's data directory:
//
//	<data>/shards/<shard id>/wal/        raft-wal segments and its meta database
//	<data>/shards/<shard id>/snapshots/  raft file snapshots (the newest Retain kept)
//
// # Contract
//
// [Open] and [NewInmem] return a [Stores]; its fields are safe for the
// concurrent use hashicorp/raft makes of them. [Stores.Close] must be
// called only after the raft.Raft that uses them has shut down; it is
// idempotent. An error from Open names the folder and what went wrong
// (missing permission, a corrupt WAL). Log entries up to raft-wal's 64 MiB
// record limit are accepted; larger ones fail StoreLogs.
package raftstore
