package node

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"

	"dsspmesh/mesh"
	"dsspmesh/node/trust"
)

// startTrust builds the trust room (node/trust) over d and filters
// revoked nodes out of n.members.
func (n *Node) startTrust(d Deps) error {
	var key ed25519.PublicKey
	if d.Dir.NodeKey != nil {
		key = d.Dir.NodeKey.Public().(ed25519.PublicKey)
	}
	t, err := trust.New(trust.Deps{Self: n.id, Key: key, Store: d.Dir, Transport: d.Transport, Membership: d.Membership,
		Shards: func() trust.Shards {
			n.mu.RLock()
			defer n.mu.RUnlock()
			if n.shards == nil {
				return nil
			}
			return n.shards
		},
		Verify: d.VerifyOperator, Event: n.events.Add, Logger: n.log, OnSelfRevoked: n.revoked,
		Relay: func(ctx context.Context, m mesh.Member, id mesh.NodeID, mac []byte) error {
			_, err := n.controlCall(ctx, m, controlMsg{Op: "revoke", ID: string(id), MAC: mac})
			return err
		}})
	if err != nil {
		return err
	}
	n.trust, n.members = t, t.Members()
	return nil
}

// ErrRevoked ends Run when the mesh's operator revoked this node.
var ErrRevoked = errors.New("this node is revoked")

// revoked is told by the trust room that this node is revoked: Run stops
// (leaving as it can) and returns an error saying so, which the command
// prints as it exits.
func (n *Node) revoked(why string) {
	n.stopRun(fmt.Errorf("%w: %s; a node the operator revoked cannot rejoin this mesh: run it with a new --data-dir (a new id) once the operator allows it", ErrRevoked, why))
}
