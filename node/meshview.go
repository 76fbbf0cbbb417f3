package node

import (
	"context"

	"dsspmesh/mesh"
	"dsspmesh/node/status"
)

// watchMesh refreshes the view of the other members and turns what it
// sees into leader and quorum events until ctx ends.
func (n *Node) watchMesh(ctx context.Context) {
	n.view.Watch(ctx, status.Watch{Self: n.id, Members: n.members, Events: n.events, Now: n.now, Logger: n.log, Replication: n.jobSpec().Replication,
		Shards: func() []ShardStatus { return n.Status().Shards },
		Ask: func(ctx context.Context, m mesh.Member) ([]byte, error) {
			_, payload, err := n.controlCallPayload(ctx, m, controlMsg{Op: "view"})
			return payload, err
		}})
}
