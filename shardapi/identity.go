package shardapi

import (
	"crypto/ed25519"
	"slices"

	"dsspmesh/mesh"
)

// MaxIdentities bounds each of a shard's replicated identity tables (the
// revoked ids, the pinned keys of legacy ids), so no member can grow a
// snapshot without limit by proposing them.
const MaxIdentities = 4096

// Identities is the identity state a shard replicates (shard/identity.go):
// the node ids revoked by an operator (`dssp revoke`) and the public key
// pinned for each legacy id (an id that is not derived from its key,
// mesh.NodeID.SelfCertifying; node/trust accepts a legacy id only where pinned). Every shard's group
// holds its own copy; a node's view is the union of the copies its
// replicas hold and what it recorded in its data dir.
type Identities struct {
	Revoked []mesh.NodeID                     // sorted
	Pins    map[mesh.NodeID]ed25519.PublicKey // legacy id → its first key
	// MACs are the operator's authentications of the revocations that
	// came with one (mesh.MeshKey.OperatorMAC), unchecked by the shard: a
	// node passes them on to nodes that check them.
	MACs map[mesh.NodeID][]byte
}

// IsRevoked reports whether id is in Revoked.
func (ids Identities) IsRevoked(id mesh.NodeID) bool {
	_, ok := slices.BinarySearch(ids.Revoked, id)
	return ok
}
