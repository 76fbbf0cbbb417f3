package mesh

import (
	"cmp"
	"hash/fnv"
	"slices"
)

// Place returns the replicas of shard among nodes, best first: the r nodes
// with the highest rendezvous score for the shard (all of them if fewer
// than r). The result depends only on the set of nodes, not their order, so
// every node with the same membership view agrees; when one node joins or
// leaves, only the shards whose top r include that node change. The first
// replica is a natural preferred leader.
func Place(shard uint32, nodes []NodeID, r int) []NodeID {
	type scored struct {
		id    NodeID
		score uint64
	}
	all := make([]scored, 0, len(nodes))
	seen := make(map[NodeID]bool, len(nodes))
	for _, id := range nodes {
		if !seen[id] {
			seen[id] = true
			all = append(all, scored{id, rendezvousScore(shard, id)})
		}
	}
	slices.SortFunc(all, func(a, b scored) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	out := make([]NodeID, 0, min(r, len(all)))
	for _, s := range all[:min(r, len(all))] {
		out = append(out, s.id)
	}
	return out
}

// PlaceAll returns Place for shards 0..shards-1.
func PlaceAll(shards int, nodes []NodeID, r int) [][]NodeID {
	out := make([][]NodeID, shards)
	for s := range out {
		out[s] = Place(uint32(s), nodes, r)
	}
	return out
}

// LiveIDs returns the ids of members, the usual input to Place.
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
