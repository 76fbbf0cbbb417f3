// Package datadir is a node's folder (--data-dir): its key pair (node.key,
// the 32-byte ed25519 seed, mode 0600, refused if group or others may read
// it) and its id, both kept for life (a restarted node is the same member,
// worker and Raft voter). A fresh data dir derives its id from its key
// (mesh.DeriveID), so no other key can speak as it; a data dir of a build
// before self-certifying ids keeps its random id (node-xxxxxxxx) and gets a
// key at its first start, which peers then pin to that id. It also keeps
// the identities the node learnt (identities.json: revoked ids, pinned
// keys), so a restarted node refuses them before its replicas replay. The
// folder holds the job spec it trains (spec.json, written only once a
// start has succeeded); the gossip addresses of the peers last seen (seeds for a restart without
// --join); the fingerprint of the mesh key it was started with; and an
// exclusive lock that keeps a second process off it. The shards' Raft state
// lives beside these files (raftstore.ShardDir).
//
// Files are written atomically (a temporary file renamed into place and
// fsynced). Each file is written by one goroutine at a time (the node:
// peers.json by its shard manager, identities.json by its identity sync,
// the rest by its start); writes of different files may run concurrently,
// each through its own temporary file. Errors name the folder.
package datadir
