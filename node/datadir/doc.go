// Package datadir is a node's folder (--data-dir): its id, kept for life
// (a restarted node is the same member, worker and Raft voter); the job
// spec it trains (spec.json, written only once a start has succeeded); the
// gossip addresses of the peers last seen (seeds for a restart without
// --join); the fingerprint of the mesh key it was started with; and an
// exclusive lock that keeps a second process off it. The shards' Raft state
// lives beside these files (raftstore.ShardDir).
//
// Files are written atomically (a temporary file renamed into place and
// fsynced). A [Dir] is used from one goroutine at a time; errors name the
// folder.
package datadir
