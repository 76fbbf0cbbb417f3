package mesh

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func ids(n int) []NodeID {
	out := make([]NodeID, n)
	for i := range out {
		out[i] = NodeID(fmt.Sprintf("node-%d", i))
	}
	return out
}

func TestPlaceSameOnEveryNode(t *testing.T) {
	nodes := ids(8)
	want := PlaceAll(64, nodes, 3)
	r := rand.New(rand.NewPCG(1, 2))
	for range 8 { // each node's view lists members in its own order
		view := slices.Clone(nodes)
		r.Shuffle(len(view), func(i, j int) { view[i], view[j] = view[j], view[i] })
		got := PlaceAll(64, view, 3)
		for s := range want {
			if !slices.Equal(got[s], want[s]) {
				t.Fatalf("shard %d: %v vs %v", s, got[s], want[s])
			}
		}
	}
	for s, reps := range want {
		if len(reps) != 3 || reps[0] == reps[1] || reps[1] == reps[2] || reps[0] == reps[2] {
			t.Fatalf("shard %d replicas %v", s, reps)
		}
	}
}

// TestPlaceBalance: no node holds more than ⌈shards·r/n⌉ replicas, every
// shard has r distinct ones, at every size (including those where plain
// rendezvous hashing put 8 of 8 shards on one node of four).
func TestPlaceBalance(t *testing.T) {
	for _, c := range []struct{ shards, nodes, r int }{
		{64, 8, 3}, {8, 4, 3}, {6, 4, 3}, {1, 4, 3}, {4, 4, 3}, {16, 5, 3}, {7, 3, 3}, {5, 7, 2}, {100, 9, 3}, {3, 10, 1},
	} {
		for seed := range 20 {
			nodes := make([]NodeID, c.nodes)
			for i := range nodes {
				nodes[i] = NodeID(fmt.Sprintf("node-%d-%d", seed, i))
			}
			count := map[NodeID]int{}
			for s, reps := range PlaceAll(c.shards, nodes, c.r) {
				if len(reps) != c.r || len(slices.Compact(slices.Sorted(slices.Values(reps)))) != c.r {
					t.Fatalf("%+v seed %d: shard %d replicas %v", c, seed, s, reps)
				}
				for _, id := range reps {
					count[id]++
				}
			}
			capacity := (c.shards*c.r + c.nodes - 1) / c.nodes
			for id, n := range count {
				if n > capacity {
					t.Fatalf("%+v seed %d: %s holds %d replicas, cap %d", c, seed, id, n, capacity)
				}
			}
		}
	}
}

// TestPlaceBestFirst: each shard's replicas come in rendezvous order, and a
// shard placed before any node is full gets plain rendezvous's top r.
func TestPlaceBestFirst(t *testing.T) {
	nodes := ids(8)
	all := PlaceAll(64, nodes, 3)
	for s, reps := range all {
		for i := 1; i < len(reps); i++ {
			if rendezvousScore(uint32(s), reps[i-1]) < rendezvousScore(uint32(s), reps[i]) {
				t.Fatalf("shard %d replicas %v not best first", s, reps)
			}
		}
	}
	order := slices.Clone(nodes)
	slices.SortFunc(order, func(a, b NodeID) int {
		return byScore(scored{a, rendezvousScore(0, a)}, scored{b, rendezvousScore(0, b)})
	})
	if !slices.Equal(all[0], order[:3]) {
		t.Fatalf("shard 0 on %v, rendezvous top 3 %v", all[0], order[:3])
	}
}

// TestPlaceMovement: a join moves few replicas (most to the joiner: the
// cap shrinks, so a few move between others), and the joiner leaving
// restores the old placement exactly.
func TestPlaceMovement(t *testing.T) {
	const shards, r = 64, 3
	before := PlaceAll(shards, ids(8), r)
	after := PlaceAll(shards, ids(9), r) // node-8 joins
	moved, toJoiner := 0, 0
	for s := range before {
		for _, id := range after[s] {
			if !slices.Contains(before[s], id) {
				moved++
				if id == "node-8" {
					toJoiner++
				}
			}
		}
	}
	// The joiner's fair share is shards·r/9 ≈ 21; plain rendezvous moved
	// about that many, all to the joiner.
	if limit := 2.0 / 9 * shards * r; float64(moved) > limit || toJoiner*2 < moved {
		t.Fatalf("join moved %d replicas (%d to the joiner), limit %.1f with at least half to the joiner", moved, toJoiner, limit)
	}
	t.Logf("one join moved %d of %d replicas, %d to the joiner", moved, shards*r, toJoiner)
	back := PlaceAll(shards, ids(8), r)
	for s := range before {
		if !slices.Equal(back[s], before[s]) {
			t.Fatalf("shard %d not restored", s)
		}
	}
}

func TestPlaceFewerNodesThanReplicas(t *testing.T) {
	if got := PlaceAll(6, ids(2), 3); len(got[5]) != 2 {
		t.Fatalf("got %v", got)
	}
	if got := PlaceAll(6, nil, 3); len(got[5]) != 0 {
		t.Fatalf("got %v", got)
	}
}
