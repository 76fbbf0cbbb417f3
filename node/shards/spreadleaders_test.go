package shards

import (
	"slices"
	"testing"

	"dsspmesh/mesh"
)

// TestLeadTargetNeverUndoesATransfer: a node over its share hands a shard
// to the voter leading fewest, only when that one leads at least two
// fewer, so the receiver (now at most one behind) never hands it back. The
// rule it replaced, any voter, passed one shard between two nodes that
// each led three of eight for minutes.
func TestLeadTargetNeverUndoesATransfer(t *testing.T) {
	abc := []mesh.NodeID{"a", "b", "c"}
	for _, tc := range []struct {
		name  string
		self  mesh.NodeID
		leads map[mesh.NodeID]int
		want  mesh.NodeID
	}{
		{"to the voter leading fewest", "a", map[mesh.NodeID]int{"a": 4, "b": 2, "c": 1}, "c"},
		{"equals: the first in placement", "a", map[mesh.NodeID]int{"a": 4, "b": 1, "c": 1}, "b"},
		{"one fewer: kept", "a", map[mesh.NodeID]int{"a": 3, "b": 2, "c": 3}, ""},
		{"unknown counts as none", "c", map[mesh.NodeID]int{"c": 2}, "a"},
	} {
		if got := leadTarget(tc.self, abc, tc.leads, tc.leads[tc.self]); got != tc.want {
			t.Errorf("%s: leadTarget = %q, want %q", tc.name, got, tc.want)
		}
	}
	// Two nodes over their share, as in the run that flip-flopped: after
	// each transfer the receiver's own rule keeps the shard.
	leads := map[mesh.NodeID]int{"a": 3, "b": 3, "c": 1, "d": 1}
	for range 8 {
		moved := false
		for _, self := range []mesh.NodeID{"a", "b", "c", "d"} {
			for _, want := range [][]mesh.NodeID{{"a", "b", "c"}, {"b", "a", "d"}} {
				if !slices.Contains(want, self) {
					continue
				}
				if to := leadTarget(self, want, leads, leads[self]); to != "" && leads[self] > 2 {
					leads[self]--
					leads[to]++
					moved = true
				}
			}
		}
		if !moved {
			break
		}
	}
	for id, n := range leads {
		if n > 2 {
			t.Fatalf("leads settled at %v: %s still leads %d of 8 shards on 4 nodes", leads, id, n)
		}
	}
}
