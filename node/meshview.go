package node

import (
	"context"

	"dsspmesh/mesh"
	"dsspmesh/node/status"
)

// The mesh view (node/status/meshview.go): every second this node asks
// other members for their view over the control channel and merges the
// answers into its status; this is its own answer.

// localView is this node's answer to op "view".
func (n *Node) localView() status.PeerView {
	n.mu.RLock()
	shards, w := n.shards, n.worker
	n.mu.RUnlock()
	var v status.PeerView
	if shards != nil {
		all, workers := shards.Status()
		for _, sh := range all {
			if sh.Local != "" {
				v.Shards = append(v.Shards, sh)
			}
		}
		v.Workers = workers
	}
	if w != nil {
		v.Worker = w.Status()
	}
	return v
}

// watchMesh refreshes the view of the other members and turns what it
// sees into leader events until ctx ends.
func (n *Node) watchMesh(ctx context.Context) {
	n.view.Watch(ctx, status.Watch{Self: n.id, Members: n.members, Events: n.events, Now: n.now, Logger: n.log,
		Shards: func() []ShardStatus { return n.Status().Shards },
		Ask: func(ctx context.Context, m mesh.Member) ([]byte, error) {
			_, payload, err := n.controlCallPayload(ctx, m, controlMsg{Op: "view"})
			return payload, err
		}})
}
