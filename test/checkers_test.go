package test

import (
	"testing"

	"dsspmesh/clock"
	"dsspmesh/node/status"
	"dsspmesh/shardapi"
)

// TestReadsWithinTheBound runs the reads checker on a hand-made history of
// one shard under ssp:1 (s_U = 1): workers a and b push iterations 0 and 1,
// and a computes iterations on slices of known versions.
func TestReadsWithinTheBound(t *testing.T) {
	apply := func(x uint64, entry string, ps ...status.HistoryPush) status.HistoryRecord {
		return status.HistoryRecord{Kind: "apply", Node: "n1", Index: x, Entry: entry, Pushes: ps}
	}
	add := func(x uint64, w string) status.HistoryRecord {
		r := apply(x, "add-worker")
		r.Worker = w
		return r
	}
	push := func(w string, iter, gap int64, released bool) status.HistoryPush {
		p := status.HistoryPush{RecvNanos: 1, Applied: true, Released: released, Gap: gap}
		p.Worker, p.Iter = clock.WorkerID(w), iter
		return p
	}
	read := func(iter int64, x uint64, m int64, unchecked bool) status.HistoryRecord {
		return status.HistoryRecord{Kind: "read", Node: "n1", Worker: "a", Iter: iter,
			Reads: []status.HistoryRead{{Index: x, Min: m, Unchecked: unchecked}}}
	}
	base := []status.HistoryRecord{
		apply(1, "init"), add(2, "a"), add(3, "b"),
		apply(4, "push", push("a", 0, 1, true)), // a at 1, b at 0: t_min 0
		apply(5, "push", push("b", 0, 0, true)), // t_min 1
		apply(6, "push", push("a", 1, 1, true)), // a at 2: t_min 1
	}
	for _, tc := range []struct {
		name        string
		read        status.HistoryRecord
		stale, over int
	}{
		{"iteration 2 on t_min 1 is within s_U 1", read(2, 6, 1, false), 0, 0},
		{"iteration 2 on t_min 0 misses iteration 0", read(2, 4, 0, false), 1, 0},
		{"a version claiming t_min 1 at index 4", read(1, 4, 1, false), 0, 1},
		{"join's fetch is not judged", read(5, 4, 0, true), 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &History{Records: append(append([]status.HistoryRecord(nil), base...), tc.read)}
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
	apply := func(x uint64, entry string, ps ...status.HistoryPush) status.HistoryRecord {
		return status.HistoryRecord{Kind: "apply", Node: "n1", Index: x, Entry: entry, Pushes: ps}
	}
	add := func(x uint64, w string) status.HistoryRecord {
		r := apply(x, "add-worker")
		r.Worker = w
		return r
	}
	push := func(w string, iter, gap int64, released bool) status.HistoryPush {
		p := status.HistoryPush{RecvNanos: 1, Applied: true, Released: released, Gap: gap}
		p.Worker, p.Iter = clock.WorkerID(w), iter
		return p
	}
	read := func(iter int64, x uint64, m int64) status.HistoryRecord {
		return status.HistoryRecord{Kind: "read", Node: "n1", Worker: "a", Iter: iter,
			Reads: []status.HistoryRead{{Index: x, Min: m}}}
	}
	base := []status.HistoryRecord{
		apply(1, "init"), add(2, "a"), add(3, "b"),
		apply(4, "push", push("a", 0, 1, true)),
		apply(5, "push", push("b", 0, 0, true)),
		apply(6, "push", push("a", 1, 1, true)),
	}
	for _, tc := range []struct {
		read  status.HistoryRecord
		stale int
	}{{read(2, 4, 0), 0}, {read(3, 4, 0), 1}} {
		h := &History{Records: append(append([]status.HistoryRecord(nil), base...), tc.read)}
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

// TestSharesChecker runs the balance layer's shares checker on hand-made
// histories under s_U = 1 (a departed worker's share may stay unread for
// s_U + lead + 1 = 3 iterations past its last clock): workers share a
// global batch of 12 over ten iterations.
func TestSharesChecker(t *testing.T) {
	const global = 12
	type cut struct {
		worker  string
		version uint64
		batch   int64
	}
	// history gives each iteration's records: each worker's read of its
	// share (cut in order from the global batch's start) and its ok.
	history := func(rounds func(iter int64) []cut) *History {
		h := &History{}
		for iter := int64(0); iter < 10; iter++ {
			pos := iter * global
			for _, c := range rounds(iter) {
				sh := &status.HistoryShare{Version: c.version, Pos: pos, Batch: c.batch, Global: global}
				pos += c.batch
				h.Records = append(h.Records,
					status.HistoryRecord{Kind: "read", Worker: c.worker, Iter: iter, Share: sh},
					status.HistoryRecord{Kind: "ok", Worker: c.worker, Iter: iter, Samples: c.batch})
			}
		}
		return h
	}
	three := []cut{{"a", 1, 4}, {"b", 1, 4}, {"c", 1, 4}}
	two := []cut{{"a", 1, 4}, {"b", 1, 4}}    // c gone, its share not handed on
	twoNew := []cut{{"a", 2, 6}, {"b", 2, 6}} // c's share handed on
	cLeaves := func(handedOn int64) *History {
		return history(func(i int64) []cut {
			switch {
			case i <= 2:
				return three
			case i < handedOn:
				return two
			}
			return twoNew
		})
	}
	overlap := history(func(int64) []cut { return three })
	for i, r := range overlap.Records {
		if r.Kind == "read" && r.Worker == "b" && r.Iter == 4 {
			sh := *r.Share
			sh.Pos -= 2
			overlap.Records[i].Share = &sh
		}
	}
	mixed := history(func(i int64) []cut {
		if i == 5 {
			return []cut{{"a", 1, 4}, {"b", 2, 4}, {"c", 1, 4}}
		}
		return three
	})
	// c is added at clock 5 (version 2 gives it a third from there) and
	// dies before its first push; version 3 hands its share on at 7.
	cJoins := func(added bool) *History {
		h := history(func(i int64) []cut {
			switch {
			case i < 5:
				return []cut{{"a", 1, 6}, {"b", 1, 6}}
			case i < 7:
				return []cut{{"a", 2, 4}, {"b", 2, 4}}
			}
			return []cut{{"a", 3, 6}, {"b", 3, 6}}
		})
		if added {
			h.Records = append(h.Records, status.HistoryRecord{Kind: "apply", Shard: 0, Entry: "add-worker", Worker: "c", Clock: 5})
		}
		return h
	}
	// c's push 3 applied on shard 0, its OK lost with c: its clock was 4.
	cAppliedUnacked := cLeaves(7)
	cAppliedUnacked.Records = append(cAppliedUnacked.Records, status.HistoryRecord{Kind: "apply", Shard: 0, Entry: "push",
		Pushes: []status.HistoryPush{{PushID: shardapi.PushID{Worker: "c", Iter: 3}, Applied: true}}})
	for _, tc := range []struct {
		name                  string
		h                     *History
		short, run, tile, bad int
	}{
		{"every share read", history(func(int64) []cut { return three }), 0, 0, 0, 0},
		{"c's share handed on two iterations after it left", cLeaves(5), 2, 2, 0, 0},
		{"c's share handed on too late", cLeaves(7), 4, 4, 0, 1},
		{"c's share never handed on", cLeaves(10), 7, 7, 0, 4},
		{"c's last push applied, its OK lost", cAppliedUnacked, 4, 4, 0, 0},
		{"b reads two of a's samples", overlap, 0, 0, 1, 0},
		{"one iteration under two allocations", mixed, 0, 0, 1, 0},
		{"c added at 5, dead before its first push", cJoins(true), 2, 2, 0, 0},
		{"a share of a worker never added", cJoins(false), 2, 2, 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := &Report{SU: 1}
			tc.h.checkShares(rep, false)
			if rep.ShareShort != tc.short || rep.MaxShortRun != int64(tc.run) || rep.ShareTiling != tc.tile || rep.ShareUnread != tc.bad {
				t.Fatalf("short %d (run %d), tiling %d, unread %d; want %d (%d), %d, %d: %v",
					rep.ShareShort, rep.MaxShortRun, rep.ShareTiling, rep.ShareUnread, tc.short, tc.run, tc.tile, tc.bad, rep.Violations)
			}
		})
	}
}
