package node

import (
	"context"
	"net"

	"dsspmesh/mesh"
	"dsspmesh/node/records"
	"dsspmesh/node/status"
)

// watchMesh refreshes the view of the other members and turns what it
// sees into leader and quorum events until ctx ends.
func (n *Node) watchMesh(ctx context.Context) {
	n.view.Watch(ctx, status.Watch{Self: n.id, Members: n.members, Events: n.events, Now: n.now, Logger: n.log, Replication: n.jobSpec().Replication,
		Shards: func() []records.ShardStatus { return n.Status().Shards },
		Ask: func(ctx context.Context, m mesh.Member) ([]byte, error) {
			_, payload, err := n.controlCallPayload(ctx, m, controlMsg{Op: "view"})
			if err == nil {
				n.trust.TakeFromView(m.ID, payload)
			}
			return payload, err
		}})
}

// advertisedHTTP is the HTTP address peers reach this node at: the
// listener's, with an unspecified host (--http-addr 0.0.0.0:7948 or
// :7948) replaced by the host this node announces for QUIC.
func advertisedHTTP(listen, quic string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		if qh, _, err := net.SplitHostPort(quic); err == nil && qh != "" {
			host = qh
		}
	}
	return net.JoinHostPort(host, port)
}
