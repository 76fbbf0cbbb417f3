// Package raftstore holds what hashicorp/raft needs from dssp: log, stable and
// snapshot stores, and a raft.StreamLayer over mesh streams.
package raftstore
