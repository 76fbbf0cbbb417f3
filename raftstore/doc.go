// Package raftstore provides what hashicorp/raft needs from dssp for each
// parameter shard: a log store and a stable store (one bbolt database on disk,
// in hashicorp/raft-boltdb's layout, boltlog.go), a
// snapshot store (raft's file snapshot store), an in-memory twin of all
// three for tests, an hclog bridge so raft logs through the node's
// *slog.Logger (routine snapshot and catch-up records at debug, and
// errors on healthy paths moved down: [RecordLevel]), a raft.StreamLayer over the mesh's QUIC Raft streams and
// the raft transport built on it ([NewMeshTransport]), whose heartbeat
// fast path runs only heartbeats that cannot change the replica's term or
// role ([GuardedTransport.GuardHeartbeats]; the rest take raft's main
// loop) and whose [GuardedTransport.Quiesce] lets a replica close its
// stores only after no heartbeat can still write to them.
//
// # Layout on disk
//
// Each shard owns one folder under the node's data directory:
//
//	<data>/shards/<shard id>/raft.db     the log and the stable store (bbolt)
//	<data>/shards/<shard id>/snapshots/  raft file snapshots (the newest Retain kept)
//	<data>/shards/<shard id>.creating/   a shard folder being created (see Storage integrity)
//
// # Contract
//
// [StreamLayer.SetAllow] (and [GuardedTransport.SetAllow]) restricts which
// authenticated peers may open raft streams; the shard replica admits the
// members of its latest configuration (anyone while it has none, so a
// joining replica hears the leader that adds it) and the peers placement
// assigns to the shard. Refused streams are closed and counted.
//
// Reading an entry back from bbolt faults its pages into the process (bbolt
// maps the file), where they would stay and count in the node's RSS: the
// store unmaps them once every 4 MiB of entries read or appended
// (dropmapped_linux.go; after every call it cost more CPU than the appends),
// and grows the file in 1 MiB steps. An entry of 16 KiB or more is stored
// alone in a bucket of its own: as plain values bbolt rewrote a leaf of up
// to four large entries on every append (20 MiB of entries wrote 110 MiB;
// now 20). In front of the bbolt log sits a cache of the newest entries bounded by
// bytes (Config.LogCacheBytes, logcache.go), so raft reads a just-written
// entry back from memory when it replicates and applies it. bbolt reuses the
// pages raft frees when it drops the log's prefix but never shrinks its
// file; Open rewrites a file that is mostly free pages (Config.CompactAt,
// compact.go: copy, fsync, rename, fsync the folder) before raft opens it.
//
// [Open] and [NewInmem] return a [Stores]; its fields are safe for the
// concurrent use hashicorp/raft makes of them. [Stores.Close] must be
// called only after the raft.Raft that uses them has shut down; it is
// idempotent. An error from Open names the folder and what went wrong
// (missing permission, a corrupt database, the file lock held by another
// process past Config.OpenTimeout, a data dir from the older raft-wal
// layout). Log entries up to bbolt's value limit (2 GiB) are accepted.
//
// # Storage integrity
//
// A shard folder appears only with an initialised raft.db in it (built
// in <id>.creating and renamed into place), so a folder whose raft.db is
// missing or empty lost it. Before bbolt opens a database, Open checks it
// with pread, never through bbolt's mapping (integrity.go): a valid meta
// page, a file as long as that page says (a truncated file made bbolt
// 1.3.6 fault in checkBucket while rebuilding its freelist), and a tree
// whose every page lies inside the file, carries its own id and type, is
// reached once and holds its elements, with the "logs" and "conf" buckets.
// It reads the first page of each tree page, not the entries' bodies: on
// 32 MiB of entries, page cache warm, it took 0.14 ms of an Open of 5.5 ms
// with 8 MiB entries, 0.75 of 10 ms with 64 KiB ones, and 27 of 100 ms
// with 1 KiB ones (a 64 MB file; BenchmarkCheckShardDir). bbolt keeps no
// checksum of data pages: each entry's value ends with a CRC-32C of its
// bytes (boltlog.go), checked on every read from the file. An entry that
// fails it is read as a no-op of its index, so its bytes reach neither the
// replica's state machine nor a follower, and the hook set with
// [Stores.SetDamaged] is told: the shard's replica then stops and is
// rebuilt from its peers (docs/design.md, "Replicas agree"). Values
// written before the trailer existed are read unchecked.
//
// The newest snapshot is checked too before raft opens it, since raft
// falls back to an older one whose entries the log no longer holds:
// state.bin's size and CRC-64 against meta.json (raft's own check), and
// meta.json against meta.sum, the SHA-256 of its fields written into the
// snapshot's folder before raft renames it into place (snapsum.go; a
// snapshot without one, of an earlier build, is not checked against it).
// raft's store checks meta.sum again whenever it opens a snapshot.
//
// A missing, empty or damaged raft.db, or a newest snapshot that fails
// these checks, is refused with a [*DamagedError]
// naming the file and the remedy: remove the shard folder, and the node
// joins the shard as a fresh replica that the leader catches up. Open does
// not start such a replica afresh itself: raft keeps the replica's term,
// vote and acknowledged entries in that file, and the rest of the shard
// still counts it as a voter, so an empty start could vote twice in a
// term, drop committed entries from a quorum, or (with a snapshot on disk)
// elect itself and roll the shard back to the snapshot. hashicorp/raft has
// no way for a replica to demote itself to a non-voter before it catches
// up; only an operator who knows the other replicas hold the shard can
// make that call. The fresh replica has forgotten its vote too, which
// matters only if an election of the very term it voted in is still
// under way when it comes back.
//
// [CheckShards] runs the same check over every shard folder of a data
// dir without opening any: a node calls it before it starts, so one
// damaged store refuses the node's whole start.
//
// A snapshot a killed process was writing stays behind as "<id>.tmp"
// (raft renames it only once complete); Open removes such folders, which
// raft's file store would skip with a warning on every listing.
//
// # Why bbolt and not raft-wal
//
// Until December 2026 the log was raft-wal v0.4.0 (the only version the
// module proxy serves). A model test (TestLogStoreMatchesModelAcrossTruncationsAndRestarts) that drives a store
// through the appends, compactions, conflicting-suffix truncations,
// restarts and crash images of a faulty follower's life found it
// unusable: after a restart that raced a segment rotation every append
// failed with "segment is sealed"; a tail truncation could start the new
// segment at index 1 ("non-monotonic append"); and a truncated segment
// could not be read after a restart (hashicorp/raft-wal#31). The bbolt
// store passes the same test.
package raftstore
