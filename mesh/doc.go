// Package mesh holds membership, node identity and security, the QUIC
// transport and its frames, an in-memory transport, and shard placement.
package mesh
