package shards

import (
	"slices"
	"testing"
	"time"

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

// TestLeadMoveNearAQuorum: on two sites (a, b on one, c, d on the other,
// 50 ms apart), a shard with voters a, b, c is led from a or b, whose
// commits need no crossing; its leader c hands it to the near voter
// leading fewest, whatever the counts; a spread stays among the near
// voters; unknown round trips leave every voter near.
func TestLeadMoveNearAQuorum(t *testing.T) {
	site := map[mesh.NodeID]int{"a": 0, "b": 0, "c": 1, "d": 1}
	rtt := func(x, y mesh.NodeID) (time.Duration, bool) {
		if site[x] == site[y] {
			return 200 * time.Microsecond, true
		}
		return 50 * time.Millisecond, true
	}
	abc := []mesh.NodeID{"a", "b", "c"}
	if got := nearQuorum(abc, rtt); !slices.Equal(got, []mesh.NodeID{"a", "b"}) {
		t.Errorf("nearQuorum(a, b, c) = %v, want a, b", got)
	}
	for _, tc := range []struct {
		name       string
		self       mesh.NodeID
		leads      map[mesh.NodeID]int
		share      int
		want, why  string
		unknownRTT bool
	}{
		{"the far leader hands over", "c", map[mesh.NodeID]int{"c": 1, "a": 3, "b": 2}, 2, "b", "near a quorum", false},
		{"a near leader within its share keeps it", "a", map[mesh.NodeID]int{"a": 2, "b": 0, "c": 0}, 2, "", "", false},
		{"a spread never leaves the near voters", "a", map[mesh.NodeID]int{"a": 4, "b": 3, "c": 0}, 2, "", "", false},
		{"a spread to a near voter", "a", map[mesh.NodeID]int{"a": 4, "b": 1, "c": 0}, 2, "b", "spread", false},
		{"unknown round trips: every voter near", "a", map[mesh.NodeID]int{"a": 4, "b": 3, "c": 0}, 2, "c", "spread", true},
		{"unknown round trips: the far voter keeps it", "c", map[mesh.NodeID]int{"c": 1}, 2, "", "", true},
	} {
		r := rtt
		if tc.unknownRTT {
			r = func(x, y mesh.NodeID) (time.Duration, bool) { return 0, x == y }
		}
		to, why := leadMove(tc.self, abc, tc.leads, tc.leads[tc.self], tc.share, r)
		if string(to) != tc.want || why != tc.why {
			t.Errorf("%s: leadMove = %q (%s), want %q (%s)", tc.name, to, why, tc.want, tc.why)
		}
	}
	// Five voters, three near: the quorum of three lies on one site.
	five := []mesh.NodeID{"a", "b", "e", "c", "d"}
	site["e"] = 0
	if got := nearQuorum(five, rtt); !slices.Equal(got, []mesh.NodeID{"a", "b", "e"}) {
		t.Errorf("nearQuorum of five = %v, want a, b, e", got)
	}
}

// TestLeadersSpreadFromTheBootstrapNode plays the rounds of a fresh mesh
// of 8 shards on 4 nodes whose bootstrap node leads all of them: each
// round every node may hand one shard over by leadMove; they settle at
// two each. When a node fails its shards' leadership goes to survivors
// (placement on the three, share 3), and when it is back, leading none,
// it takes its share again.
func TestLeadersSpreadFromTheBootstrapNode(t *testing.T) {
	live := []mesh.NodeID{"a", "b", "c", "d"}
	voters := func(s int) []mesh.NodeID { // placement: 3 of the live nodes
		n := len(live)
		return []mesh.NodeID{live[s%n], live[(s+1)%n], live[(s+2)%n]}
	}
	leader := map[int]mesh.NodeID{}
	for s := range 8 {
		leader[s] = "a"
	}
	settle := func() map[mesh.NodeID]int {
		share := (8 + len(live) - 1) / len(live)
		for range 40 {
			leads := map[mesh.NodeID]int{}
			for _, l := range leader {
				leads[l]++
			}
			moved := false
			for _, self := range live {
				for s := range 8 { // one transfer a node a round
					if leader[s] != self || !slices.Contains(voters(s), self) {
						continue
					}
					if to, _ := leadMove(self, voters(s), leads, leads[self], share, nil); to != "" {
						leader[s], leads[self], leads[to] = to, leads[self]-1, leads[to]+1
						moved = true
						break
					}
				}
			}
			if !moved {
				return leads
			}
		}
		t.Fatalf("leaders still moving: %v", leader)
		return nil
	}
	if leads := settle(); leads["a"] != 2 || leads["b"] != 2 || leads["c"] != 2 || leads["d"] != 2 {
		t.Fatalf("settled at %v, want 2 each", leads)
	}
	// b fails: its shards elect another voter.
	live = []mesh.NodeID{"a", "c", "d"}
	for s, l := range leader {
		if l == "b" {
			leader[s] = voters(s)[0]
		}
	}
	if leads := settle(); leads["b"] != 0 || max(leads["a"], leads["c"], leads["d"]) > 3 {
		t.Fatalf("after b failed: %v", leads)
	}
	// b is back, leading none: it takes its share again.
	live = []mesh.NodeID{"a", "b", "c", "d"}
	if leads := settle(); leads["a"] != 2 || leads["b"] != 2 || leads["c"] != 2 || leads["d"] != 2 {
		t.Fatalf("after b came back: %v, want 2 each", leads)
	}
}
