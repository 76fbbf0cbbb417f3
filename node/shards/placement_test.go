package shards

import (
	"fmt"
	"slices"
	"testing"

	"dsspmesh/mesh"
)

func TestPlacementCacheMatchesPlaceAllAndFollowsMembership(t *testing.T) {
	c := newPlacementCache(16, 3)
	ids := []mesh.NodeID{"node-c", "node-a", "node-b", "node-d"}
	for _, live := range [][]mesh.NodeID{ids, {"node-d", "node-b", "node-a", "node-c"}, ids[:3], append(slices.Clone(ids), "node-e")} {
		got, want := c.get(live), mesh.PlaceAll(16, live, 3)
		for s := range 16 {
			if !slices.Equal(got[s], want[s]) {
				t.Fatalf("members %v shard %d: cached %v, PlaceAll %v", live, s, got[s], want[s])
			}
		}
	}
}

// BenchmarkPlacementUpkeep is what one upkeep tick pays for placement at
// 1 000 nodes × 4 000 shards: with an unchanged membership (the cache) and
// when it changed (a full mesh.PlaceAll, as every tick paid before).
func BenchmarkPlacementUpkeep(b *testing.B) {
	ids := make([]mesh.NodeID, 1000)
	for i := range ids {
		ids[i] = mesh.NodeID(fmt.Sprintf("node-%08x", i*2654435761))
	}
	b.Run("unchanged", func(b *testing.B) {
		c := newPlacementCache(4000, 3)
		c.get(ids)
		for b.Loop() {
			c.get(ids)
		}
	})
	b.Run("changed", func(b *testing.B) {
		c := newPlacementCache(4000, 3)
		for i := 0; b.Loop(); i++ {
			c.get(ids[:len(ids)-i%2])
		}
	})
}
