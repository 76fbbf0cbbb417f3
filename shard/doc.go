// Package shard holds one Raft-replicated parameter shard: its FSM, the
// leader's gate, and push/pull handling.
package shard
