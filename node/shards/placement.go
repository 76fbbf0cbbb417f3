package shards

import (
	"slices"
	"sync"

	"dsspmesh/mesh"
)

// placementCache holds mesh.PlaceAll over one membership and recomputes it
// only when the live ids change. Placement is asked for every shard on
// every upkeep tick (300 ms), every /status and every raft stream
// accepted; mesh.Place hashes and sorts all N ids per shard, and one
// PlaceAll took 0.66 s at 1 000 nodes × 4 000 shards (BenchmarkPlaceAll in
// lab/bench), more than two cores a node at that tick. With the cache a
// tick costs sorting and comparing the N ids. Safe for concurrent use.
type placementCache struct {
	shards, r int

	mu  sync.Mutex
	ids []mesh.NodeID // sorted
	all [][]mesh.NodeID
}

func newPlacementCache(shards, r int) *placementCache {
	return &placementCache{shards: shards, r: r}
}

// get returns every shard's placement over live (any order); the result
// is shared: callers must not modify it.
func (c *placementCache) get(live []mesh.NodeID) [][]mesh.NodeID {
	ids := slices.Clone(live)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.all == nil || !slices.Equal(ids, c.ids) {
		c.ids, c.all = ids, mesh.PlaceAll(c.shards, ids, c.r)
	}
	return c.all
}
