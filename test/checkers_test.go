package test

import (
	"testing"

	"dsspmesh/clock"
	"dsspmesh/node"
)

// TestReadsWithinTheBound runs the reads checker on a hand-made history of
// one shard under ssp:1 (s_U = 1): workers a and b push iterations 0 and 1,
// and a computes iterations on slices of known versions.
func TestReadsWithinTheBound(t *testing.T) {
	apply := func(x uint64, entry string, ps ...node.HistoryPush) node.HistoryRecord {
		return node.HistoryRecord{Kind: "apply", Node: "n1", Index: x, Entry: entry, Pushes: ps}
	}
	add := func(x uint64, w string) node.HistoryRecord {
		r := apply(x, "add-worker")
		r.Worker = w
		return r
	}
	push := func(w string, iter, gap int64, released bool) node.HistoryPush {
		p := node.HistoryPush{RecvNanos: 1, Applied: true, Released: released, Gap: gap}
		p.Worker, p.Iter = clock.WorkerID(w), iter
		return p
	}
	read := func(iter int64, x uint64, m int64, unchecked bool) node.HistoryRecord {
		return node.HistoryRecord{Kind: "read", Node: "n1", Worker: "a", Iter: iter,
			Reads: []node.HistoryRead{{Index: x, Min: m, Unchecked: unchecked}}}
	}
	base := []node.HistoryRecord{
		apply(1, "init"), add(2, "a"), add(3, "b"),
		apply(4, "push", push("a", 0, 1, true)), // a at 1, b at 0: t_min 0
		apply(5, "push", push("b", 0, 0, true)), // t_min 1
		apply(6, "push", push("a", 1, 1, true)), // a at 2: t_min 1
	}
	for _, tc := range []struct {
		name        string
		read        node.HistoryRecord
		stale, over int
	}{
		{"iteration 2 on t_min 1 is within s_U 1", read(2, 6, 1, false), 0, 0},
		{"iteration 2 on t_min 0 misses iteration 0", read(2, 4, 0, false), 1, 0},
		{"a version claiming t_min 1 at index 4", read(1, 4, 1, false), 0, 1},
		{"join's fetch is not judged", read(5, 4, 0, true), 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &History{Records: append(append([]node.HistoryRecord(nil), base...), tc.read)}
			rep, err := h.Check("ssp:1", false)
			if err != nil {
				t.Fatal(err)
			}
			if rep.ReadStale != tc.stale || rep.ReadOverclaim != tc.over {
				t.Fatalf("stale %d, overclaimed %d; want %d, %d: %s %v", rep.ReadStale, rep.ReadOverclaim, tc.stale, tc.over, rep, rep.Violations)
			}
		})
	}
}

// TestPipelinedReadsAndGaps runs the checkers on the history of
// TestReadsWithinTheBound as a pipelined ssp:2 job: the gate (ssp:1)
// released every push at gap ≤ 1, which the replay agrees with, and
// reads are judged by the job's s_U = 2 — iteration 2 on t_min 0 is within
// it, iteration 3 on t_min 0 is not.
func TestPipelinedReadsAndGaps(t *testing.T) {
	apply := func(x uint64, entry string, ps ...node.HistoryPush) node.HistoryRecord {
		return node.HistoryRecord{Kind: "apply", Node: "n1", Index: x, Entry: entry, Pushes: ps}
	}
	add := func(x uint64, w string) node.HistoryRecord {
		r := apply(x, "add-worker")
		r.Worker = w
		return r
	}
	push := func(w string, iter, gap int64, released bool) node.HistoryPush {
		p := node.HistoryPush{RecvNanos: 1, Applied: true, Released: released, Gap: gap}
		p.Worker, p.Iter = clock.WorkerID(w), iter
		return p
	}
	read := func(iter int64, x uint64, m int64) node.HistoryRecord {
		return node.HistoryRecord{Kind: "read", Node: "n1", Worker: "a", Iter: iter,
			Reads: []node.HistoryRead{{Index: x, Min: m}}}
	}
	base := []node.HistoryRecord{
		apply(1, "init"), add(2, "a"), add(3, "b"),
		apply(4, "push", push("a", 0, 1, true)),
		apply(5, "push", push("b", 0, 0, true)),
		apply(6, "push", push("a", 1, 1, true)),
	}
	for _, tc := range []struct {
		read  node.HistoryRecord
		stale int
	}{{read(2, 4, 0), 0}, {read(3, 4, 0), 1}} {
		h := &History{Records: append(append([]node.HistoryRecord(nil), base...), tc.read)}
		rep, err := h.Check("ssp:2", true)
		if err != nil {
			t.Fatal(err)
		}
		if rep.SU != 2 || rep.GateSU != 1 || rep.ReplayMismatch != 0 || rep.ReadStale != tc.stale {
			t.Errorf("iteration %d on t_min 0: %s %v; want s_U 2, gate's 1, no replay mismatch, %d stale", tc.read.Iter, rep, rep.Violations, tc.stale)
		}
	}
	// The same log under ssp:1 pipelined (a gate of ssp:0) could not have
	// released a at gap 1: the replay says so.
	h := &History{Records: base}
	if rep, err := h.Check("ssp:1", true); err != nil || rep.ReplayMismatch == 0 {
		t.Errorf("ssp:1 pipelined: %v %v, want a replay mismatch", rep, err)
	}
	if _, err := h.Check("bsp", true); err == nil {
		t.Error("bsp pipelined: no error")
	}
}
