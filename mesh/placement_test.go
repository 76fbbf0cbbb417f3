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

func TestPlaceBalance(t *testing.T) {
	count := map[NodeID]int{}
	for _, reps := range PlaceAll(64, ids(8), 3) {
		for _, id := range reps {
			count[id]++
		}
	}
	mean := 64.0 * 3 / 8
	for id, c := range count {
		if float64(c) > 1.5*mean {
			t.Errorf("%s holds %d replicas, mean %.0f", id, c, mean)
		}
	}
	t.Logf("replicas per node (mean %.0f): %v", mean, count)
}

func TestPlaceMinimalMovement(t *testing.T) {
	const shards, r = 64, 3
	before := PlaceAll(shards, ids(8), r)
	after := PlaceAll(shards, ids(9), r) // node-8 joins
	moved := 0
	for s := range before {
		for _, id := range after[s] {
			if !slices.Contains(before[s], id) {
				moved++
				if id != "node-8" {
					t.Fatalf("shard %d gained %s, not the joiner", s, id)
				}
			}
		}
	}
	limit := 2.0 / 9 * shards * r
	if float64(moved) > limit {
		t.Fatalf("join moved %d replicas, limit 2/N·total = %.1f", moved, limit)
	}
	t.Logf("one join moved %d of %d replicas (limit %.1f)", moved, shards*r, limit)
	// And the joiner leaving restores the old placement exactly.
	back := PlaceAll(shards, ids(8), r)
	for s := range before {
		if !slices.Equal(back[s], before[s]) {
			t.Fatalf("shard %d not restored", s)
		}
	}
}

func TestPlaceFewerNodesThanReplicas(t *testing.T) {
	if got := Place(5, ids(2), 3); len(got) != 2 {
		t.Fatalf("got %v", got)
	}
	if got := Place(5, nil, 3); len(got) != 0 {
		t.Fatalf("got %v", got)
	}
}
