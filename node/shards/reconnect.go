package shards

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"dsspmesh/mesh"
)

// Reconnect rejoins members that dropped out of the live list: memberlist
// never probes a node it declared dead, so after a network partition heals
// each side would go on believing the other dead, and the mesh would stay
// split for good. Every reconnectEvery this loop asks memberlist to join
// the last known gossip address of each such member (serf's reconnect does
// the same). A member that left gracefully is retried too, which costs one
// refused dial; members gone for reconnectFor are forgotten. It runs
// until ctx ends. It lives with the shard manager, the room that follows
// membership.
func Reconnect(ctx context.Context, members mesh.Membership, self mesh.NodeID, now func() time.Time, log *slog.Logger) {
	const (
		reconnectEvery = 2 * time.Second
		reconnectFor   = time.Hour
	)
	type seen struct {
		addr string
		last time.Time
	}
	known := map[mesh.NodeID]seen{}
	tick := 0
	t := time.NewTicker(reconnectEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := now()
		live := map[mesh.NodeID]bool{}
		for _, m := range members.Members() {
			live[m.ID] = true
			if m.ID != self {
				known[m.ID] = seen{addr: m.Addr, last: now}
			}
		}
		var lost []string
		for id, s := range known {
			switch {
			case live[id]:
			case now.Sub(s.last) > reconnectFor:
				delete(known, id)
			default:
				lost = append(lost, s.addr)
			}
		}
		if len(lost) == 0 {
			continue
		}
		// One address per tick: a join to a dead address blocks for
		// memberlist's TCP timeout, and leaving waits for this loop.
		slices.Sort(lost)
		addr := lost[tick%len(lost)]
		tick++
		jctx, cancel := context.WithTimeout(ctx, reconnectEvery)
		k, err := members.Join(jctx, []string{addr})
		cancel()
		log.Debug("reconnect", "peer", addr, "joined", k, "err", err)
	}
}
