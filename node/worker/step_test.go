package worker

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"dsspmesh/node/records"
	"dsspmesh/shardapi"
)

// The worker loop's decisions as golden cases, in the style of clock's
// tables: a Step starts from a state, a script of inputs (replies, re-adds,
// a whole push settling, align rounds) runs through it, and the decisions
// it makes — with the clocks after each — must read exactly as written.
// The loop (worker.go, pipeline.go) does the I/O each decision names, so
// these are the decisions a worker makes on the mesh.
//
// Script lines: "next", "targets" (no push in flight) or "targets
// in-flight", "keep S N" (push of N samples to shard S), "reply S ERR
// [held=D]", "readd S CLK|err", "settle ITER ERR", "need-align",
// "mark-moved ITER", "align every|rest" (the round's target and shards),
// "set S CLK" (an align's answer), "join-fetch". ERR is ok, transport,
// not-leader, canceled, unknown-worker, non-finite, outlier or future.

// errOf is the error a script names.
func errOf(name string) error {
	switch name {
	case "ok":
		return nil
	case "transport", "canceled":
		return errors.New("stream reset")
	case "not-leader":
		return fmt.Errorf("shard 0: %w", shardapi.ErrNotLeader)
	case "unknown-worker":
		return &shardapi.RejectError{Reason: shardapi.ReasonUnknownWorker}
	case "non-finite":
		return errors.Join(&shardapi.RejectError{Reason: shardapi.ReasonNonFinite})
	case "outlier":
		return errors.Join(&shardapi.RejectError{Reason: shardapi.ReasonOutlier}, &shardapi.RejectError{Reason: shardapi.ReasonNonFinite})
	case "future":
		return &shardapi.RejectError{Reason: shardapi.ReasonFuture}
	}
	panic("unknown error " + name)
}

func atoi(t *testing.T, s string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// replay runs script through m and returns one line a decision.
func replay(t *testing.T, m *Step, script string) string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(script), "\n") {
		f := strings.Fields(line)
		var got string
		switch f[0] {
		case "next":
			got = fmt.Sprintf("compute %d", m.Next())
		case "targets":
			got = fmt.Sprintf("push to %v", m.Targets(len(f) > 1))
		case "keep":
			if m.Keep(int(atoi(t, f[1])), atoi(t, f[2])) {
				got = "keep the slice"
			} else {
				got = "fetch the slice"
			}
		case "reply":
			r := Reply{Err: errOf(f[2]), Canceled: f[2] == "canceled"}
			if len(f) > 3 {
				d, err := time.ParseDuration(strings.TrimPrefix(f[3], "held="))
				if err != nil {
					t.Fatal(err)
				}
				r.Held = d
			}
			d := m.Replied(int(atoi(t, f[1])), r)
			got = d.Act.String()
			if d.ObserveHold > 0 {
				got += " hold=" + d.ObserveHold.String()
			}
			if d.Rejected {
				got += " event=rejected"
			}
		case "readd":
			var err error
			var clk int64
			if f[2] == "err" {
				err = errors.New("no leader")
			} else {
				clk = atoi(t, f[2])
			}
			got = m.ReAdded(int(atoi(t, f[1])), clk, err).String()
		case "settle":
			st := m.Settle(atoi(t, f[1]), errOf(f[2]), f[2] == "canceled")
			got = st.Verdict.String()
			if st.Verdict.DropAhead() {
				got += " drop-ahead"
			}
			if st.Refused != nil {
				got += " count-refusal"
			}
			if st.Err != nil {
				got += " fail"
			}
			got += fmt.Sprintf(" in-a-row=%d", m.InARow)
		case "need-align":
			got = fmt.Sprintf("align %v", m.NeedAlign())
		case "mark-moved":
			m.MarkMoved(atoi(t, f[1]))
			var u []bool
			for _, r := range m.Reads {
				u = append(u, r.Unchecked)
			}
			got = fmt.Sprintf("unchecked %v", u)
		case "align":
			target, shards := m.AlignRound(f[1] == "every")
			got = fmt.Sprintf("add at %d to %v", target, shards)
		case "set":
			m.Iters[atoi(t, f[1])] = atoi(t, f[2])
			got = "ok"
		case "join-fetch":
			got = fmt.Sprintf("fetch %d", m.JoinFetch())
		default:
			t.Fatalf("unknown script line %q", line)
		}
		out = append(out, fmt.Sprintf("%-22s → %s  iters=%v", line, got, m.Iters))
	}
	return strings.Join(out, "\n")
}

func TestStepGolden(t *testing.T) {
	fresh := func(index uint64, min int64) records.SliceRead {
		return records.SliceRead{Version: shardapi.Version{Index: index, Min: min}}
	}
	for _, c := range []struct {
		name         string
		iters        []int64
		reads        []records.SliceRead
		ahead, slack int64
		script, want string
	}{{
		// One lock-step iteration: compute the lowest clock, push to
		// every shard, both acknowledge, the push settles.
		name: "iteration", iters: []int64{3, 3}, ahead: 1,
		script: `
next
targets
reply 0 ok
reply 1 ok
settle 3 ok`,
		want: `
next                   → compute 3  iters=[3 3]
targets                → push to [true true]  iters=[3 3]
reply 0 ok             → done  iters=[4 3]
reply 1 ok             → done  iters=[4 4]
settle 3 ok            → completed in-a-row=0  iters=[4 4]`,
	}, {
		// Push: a slice fresh enough for the iterations its reply serves
		// is kept (ssp:2: t_min 4 covers iteration 6 within 2); one too
		// old, read outside the gate, or in a join's fetch is fetched.
		// Under --pipeline (ahead 2) the same slice serves one more
		// iteration and no longer covers it.
		name: "push", iters: []int64{5, 5, 5}, ahead: 1, slack: 2,
		reads: []records.SliceRead{fresh(10, 4), fresh(10, 3), {Version: shardapi.Version{Index: 10, Min: 4}, Unchecked: true}},
		script: `
keep 0 32
keep 1 32
keep 2 32
keep 0 0`,
		want: `
keep 0 32              → keep the slice  iters=[5 5 5]
keep 1 32              → fetch the slice  iters=[5 5 5]
keep 2 32              → fetch the slice  iters=[5 5 5]
keep 0 0               → fetch the slice  iters=[5 5 5]`,
	}, {
		name: "push pipelined", iters: []int64{5}, ahead: 2, slack: 2, reads: []records.SliceRead{fresh(10, 4)},
		script: `
keep 0 32
targets in-flight`,
		want: `
keep 0 32              → fetch the slice  iters=[5]
targets in-flight      → push to [true]  iters=[5]`,
	}, {
		// Reply: a refused gradient is counted and the same iteration
		// goes again only to the shard that refused it; 20 in a row stop
		// the worker; a rejection no resend repairs stops it at once.
		name: "reply", iters: []int64{7, 7}, ahead: 1,
		script: `
reply 0 ok
reply 1 non-finite
settle 7 non-finite
next
targets
reply 1 ok
settle 7 ok
reply 0 future
settle 8 future`,
		want: `
reply 0 ok             → done  iters=[8 7]
reply 1 non-finite     → give-up event=rejected  iters=[8 7]
settle 7 non-finite    → refused drop-ahead count-refusal in-a-row=1  iters=[8 7]
next                   → compute 7  iters=[8 7]
targets                → push to [false true]  iters=[8 7]
reply 1 ok             → done  iters=[8 8]
settle 7 ok            → completed in-a-row=0  iters=[8 8]
reply 0 future         → give-up event=rejected  iters=[8 8]
settle 8 future        → stop drop-ahead fail in-a-row=0  iters=[8 8]`,
	}, {
		// Gate hold: a push the gate held is released later; the hold is
		// observed, the iteration done. A held push whose worker stops
		// gives up without a resend.
		name: "gate hold", iters: []int64{2, 2}, ahead: 1,
		script: `
reply 0 ok held=40ms
reply 1 canceled held=1.5s
settle 2 canceled`,
		want: `
reply 0 ok held=40ms   → done hold=40ms  iters=[3 2]
reply 1 canceled held=1.5s → give-up hold=1.5s  iters=[3 2]
settle 2 canceled      → stop drop-ahead in-a-row=0  iters=[3 2]`,
	}, {
		// Re-add: a shard that declared the worker dead re-adds it. At or
		// below this iteration the same iteration is resent; ahead (the
		// shard's t_min is higher) the worker fetches with the iteration
		// before, drops the gradient, and align then moves the other
		// shard up; the slices read for the lower clock are unchecked.
		name: "re-add", iters: []int64{4, 4}, ahead: 1, reads: []records.SliceRead{fresh(9, 3), fresh(9, 3)},
		script: `
reply 0 unknown-worker
readd 0 4
reply 0 ok
reply 1 unknown-worker
readd 1 err
reply 1 unknown-worker
readd 1 9
reply 1 ok
settle 4 ok
need-align
align rest
set 0 9
align rest
mark-moved 4`,
		want: `
reply 0 unknown-worker → re-add event=rejected  iters=[4 4]
readd 0 4              → resend  iters=[4 4]
reply 0 ok             → done  iters=[5 4]
reply 1 unknown-worker → re-add event=rejected  iters=[5 4]
readd 1 err            → resend  iters=[5 4]
reply 1 unknown-worker → re-add event=rejected  iters=[5 4]
readd 1 9              → fetch  iters=[5 8]
reply 1 ok             → done  iters=[5 9]
settle 4 ok            → moved drop-ahead in-a-row=0  iters=[5 9]
need-align             → align true  iters=[5 9]
align rest             → add at 9 to [0]  iters=[5 9]
set 0 9                → ok  iters=[9 9]
align rest             → add at 9 to []  iters=[9 9]
mark-moved 4           → unchecked [true true]  iters=[9 9]`,
	}, {
		// Leader change: a reply from a node no longer leading, or a
		// stream cut as the leader dies, resends the same (worker, iter):
		// the new leader's dedupe applies it at most once.
		name: "leader change", iters: []int64{6}, ahead: 1,
		script: `
reply 0 not-leader
reply 0 transport
reply 0 ok
settle 6 ok`,
		want: `
reply 0 not-leader     → resend  iters=[6]
reply 0 transport      → resend  iters=[6]
reply 0 ok             → done  iters=[7]
settle 6 ok            → completed in-a-row=0  iters=[7]`,
	}, {
		// Join: every shard is asked at once (a clock of 0 on each), the
		// highest clock wins, and the fetch resends the iteration before.
		name: "join", iters: []int64{0, 0, 0}, ahead: 1,
		script: `
align every
set 0 0
set 1 12
set 2 3
align rest
set 0 12
set 2 12
align rest
join-fetch`,
		want: `
align every            → add at 0 to [0 1 2]  iters=[0 0 0]
set 0 0                → ok  iters=[0 0 0]
set 1 12               → ok  iters=[0 12 0]
set 2 3                → ok  iters=[0 12 3]
align rest             → add at 12 to [0 2]  iters=[0 12 3]
set 0 12               → ok  iters=[12 12 3]
set 2 12               → ok  iters=[12 12 12]
align rest             → add at 12 to []  iters=[12 12 12]
join-fetch             → fetch 11  iters=[11 11 11]`,
	}} {
		t.Run(c.name, func(t *testing.T) {
			m := NewStep(len(c.iters), c.ahead, c.slack)
			copy(m.Iters, c.iters)
			copy(m.Reads, c.reads)
			got := replay(t, m, c.script)
			if want := strings.TrimSpace(c.want); got != want {
				t.Errorf("decisions:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// TestStepRefusalsInARowStop: the 20th refusal in a row stops the worker,
// counted like the others; an accepted push in between starts over.
func TestStepRefusalsInARowStop(t *testing.T) {
	m := NewStep(1, 1, 0)
	refused := errOf("non-finite")
	for i := 1; i <= 5; i++ {
		m.Settle(0, refused, false)
	}
	m.Iters[0] = 1
	if st := m.Settle(0, nil, false); st.Verdict != Completed || m.InARow != 0 {
		t.Fatalf("an accepted push: %+v, %d in a row", st, m.InARow)
	}
	for i := 1; i < maxRefusedInARow; i++ {
		if st := m.Settle(1, refused, false); st.Verdict != Refused || st.Refused == nil {
			t.Fatalf("refusal %d: %+v", i, st)
		}
	}
	st := m.Settle(0, refused, false)
	if st.Verdict != Stop || st.Refused == nil || st.Err == nil || !strings.Contains(st.Err.Error(), "20 gradients in a row refused") {
		t.Fatalf("20th refusal: %+v", st)
	}
}

// TestStopOnce: Stop halts the loop once and keeps the first reason.
func TestStopOnce(t *testing.T) {
	w := newWorker(Deps{Logger: discard()}, Config{}, nil)
	halted := 0
	w.halt = func() { halted++ }
	w.Stop("first")
	w.Stop("second")
	if st := w.Status(); halted != 1 || st.Stopped != "first" {
		t.Fatalf("halted %d times, stopped %q", halted, st.Stopped)
	}

}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
