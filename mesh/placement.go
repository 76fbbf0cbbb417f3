package mesh

import (
	"cmp"
	"hash/fnv"
	"slices"
)

// PlaceAll returns the replicas of shards 0..shards-1 among nodes, each
// shard's best first (the first is a natural preferred leader): rendezvous
// hashing with bounded loads. Shards are placed in order, each on the r
// nodes with the highest rendezvous score for it among those below the
// cap ⌈shards·r/n⌉ replicas, except that a node which must take every
// remaining shard to reach its share comes first (see pick). So no node
// holds more than the cap: plain rendezvous left 8 of 8 shards on one node
// of four and 3 on another, and a node's memory is its replicas' (a 100 MB
// model's 8 shards are 25 MB each with momentum). The result depends only
// on the set of nodes, not their order, so every node with the same
// membership view computes the same replica sets; a join or leave moves
// the replicas that hash to that node and, where the cap changes, a few
// more (TestPlaceMovement). With fewer than r nodes every shard is on all
// of them.
func PlaceAll(shards int, nodes []NodeID, r int) [][]NodeID {
	ids := slices.Clone(nodes)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	r = min(r, len(ids))
	out := make([][]NodeID, shards)
	if r == 0 {
		return out
	}
	capacity := (shards*r + len(ids) - 1) / len(ids)
	spare := make(map[NodeID]int, len(ids))
	for _, id := range ids {
		spare[id] = capacity
	}
	order := make([]scored, len(ids))
	for s := range out {
		for i, id := range ids {
			order[i] = scored{id, rendezvousScore(uint32(s), id)}
		}
		slices.SortFunc(order, byScore)
		out[s] = pick(order, spare, shards-s, r)
	}
	return out
}

type scored struct {
	id    NodeID
	score uint64
}

func byScore(a, b scored) int {
	if c := cmp.Compare(b.score, a.score); c != 0 {
		return c
	}
	return cmp.Compare(a.id, b.id)
}

// pick chooses r of order (best score first) for a shard with left shards
// still to place, this one included, and takes one from each one's spare.
// A node with spare ≥ left is urgent: not taking it now would leave it
// more spare than shards, a share no later shard can fill. Taking the
// urgent first (by score among them) keeps Σ min(spare, left) ≥ left·r,
// which holds at the start (n·cap ≥ shards·r) and guarantees r nodes with
// spare for every shard: each urgent node left out lowers that slack by
// one, and when more than r are urgent the slack is at least left·(urgent−r).
func pick(order []scored, spare map[NodeID]int, left, r int) []NodeID {
	taken := make([]bool, len(order))
	n := 0
	for _, urgent := range []bool{true, false} {
		for i, c := range order {
			if sp := spare[c.id]; n < r && !taken[i] && sp > 0 && (sp >= left) == urgent {
				taken[i] = true
				n++
			}
		}
	}
	chosen := make([]NodeID, 0, n)
	for i, c := range order { // best score first: the first is the preferred leader
		if taken[i] {
			chosen = append(chosen, c.id)
			spare[c.id]--
		}
	}
	return chosen
}

// PlacedIDs is LiveIDs without the members still joining (Meta.Joining):
// placement's input (PlaceAll).
func PlacedIDs(members []Member) []NodeID {
	ids := make([]NodeID, 0, len(members))
	for _, m := range members {
		if !m.Meta.Joining {
			ids = append(ids, m.ID)
		}
	}
	return ids
}

// LiveIDs returns the ids of members.
func LiveIDs(members []Member) []NodeID {
	ids := make([]NodeID, len(members))
	for i, m := range members {
		ids[i] = m.ID
	}
	return ids
}

// rendezvousScore mixes the node id's hash with the shard id; the splitmix64
// finaliser spreads neighbouring shard ids over the whole range. Changing it
// moves every shard: it is part of the protocol.
func rendezvousScore(shard uint32, id NodeID) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return mix64(h.Sum64() ^ mix64(uint64(shard)+0x9e3779b97f4a7c15))
}

func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
