package worker

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"dsspmesh/internal/golden"
	"dsspmesh/node/records"
	"dsspmesh/shardapi"
)

// The worker loop's decisions as golden transcripts (internal/golden;
// testdata/step_*.txt): a Step starts from a state, inputs (replies,
// re-adds, a whole push settling, align rounds) run through it, and the
// decisions it makes — with the clocks after each — must read exactly as
// written (go test ./node/worker -run Golden -rewrite writes them). The
// loop (worker.go, pipeline.go) does the I/O each decision names, so these
// are the decisions a worker makes on the mesh.
//
// Commands: "start iters=C,C… ahead=A slack=S [reads=INDEX:MIN[:unchecked],…]"
// (a new Step, its clocks and slices set through aligned and landed),
// "next", "targets" (no push in flight) or "targets in-flight", "keep S
// N" (push of N samples to shard S), "reply S ERR [held=D]", "readd S
// CLK|err", "settle ITER ERR", "need-align", "mark-moved ITER", "align
// every|rest" (the round's target and shards), "aligned S CLK" (an
// align's answer), "land S INDEX MIN", "lent S INDEX MIN", "rejoin",
// "join-fetch". ERR is ok, transport, not-leader, canceled,
// unknown-worker, non-finite, outlier or future.

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

func TestStepGolden(t *testing.T) {
	for _, path := range golden.Files(t, "testdata", "step_") {
		t.Run(filepath.Base(path), func(t *testing.T) {
			var m *Step
			golden.Run(t, path, func(cmd string, f []string) string {
				if cmd == "start" {
					m = startStep(t, f)
				}
				return fmt.Sprintf("%s  iters=%v", stepDo(t, m, cmd, f), m.Iters)
			})
		})
	}
}

// startStep is a new Step from "start"'s arguments.
func startStep(t *testing.T, args []string) *Step {
	kv := map[string]string{}
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		kv[k] = v
	}
	iters := strings.Split(kv["iters"], ",")
	m := NewStep(len(iters), atoi(t, kv["ahead"]), atoi(t, kv["slack"]))
	for s, c := range iters {
		m.aligned(s, atoi(t, c))
	}
	if kv["reads"] != "" {
		for s, r := range strings.Split(kv["reads"], ",") {
			f := strings.Split(r, ":")
			m.landed(s, records.SliceRead{Version: shardapi.Version{Index: uint64(atoi(t, f[0])), Min: atoi(t, f[1])}, Unchecked: len(f) > 2})
		}
	}
	return m
}

// stepDo runs one command through m and says what it decided.
func stepDo(t *testing.T, m *Step, cmd string, f []string) string {
	switch cmd {
	case "start":
		return "ok"
	case "next":
		return fmt.Sprintf("compute %d", m.Next())
	case "targets":
		return fmt.Sprintf("push to %v", m.Targets(len(f) > 0))
	case "keep":
		if m.Keep(int(atoi(t, f[0])), atoi(t, f[1])) {
			return "keep the slice"
		}
		return "fetch the slice"
	case "reply":
		r := Reply{Err: errOf(f[1]), Canceled: f[1] == "canceled"}
		if len(f) > 2 {
			d, err := time.ParseDuration(strings.TrimPrefix(f[2], "held="))
			if err != nil {
				t.Fatal(err)
			}
			r.Held = d
		}
		d := m.Replied(int(atoi(t, f[0])), r)
		got := d.Act.String()
		if d.ObserveHold > 0 {
			got += " hold=" + d.ObserveHold.String()
		}
		if d.Rejected {
			got += " event=rejected"
		}
		return got
	case "readd":
		var err error
		var clk int64
		if f[1] == "err" {
			err = errors.New("no leader")
		} else {
			clk = atoi(t, f[1])
		}
		return m.ReAdded(int(atoi(t, f[0])), clk, err).String()
	case "settle":
		st := m.Settle(atoi(t, f[0]), errOf(f[1]), f[1] == "canceled")
		got := st.Verdict.String()
		if st.Verdict.DropAhead() {
			got += " drop-ahead"
		}
		if st.Refused != nil {
			got += " count-refusal"
		}
		if st.Err != nil {
			got += " fail"
		}
		return got + fmt.Sprintf(" in-a-row=%d", m.InARow)
	case "need-align":
		return fmt.Sprintf("align %v", m.NeedAlign())
	case "mark-moved":
		m.MarkMoved(atoi(t, f[0]))
		var u []bool
		for _, r := range m.Reads {
			u = append(u, r.Unchecked)
		}
		return fmt.Sprintf("unchecked %v", u)
	case "align":
		target, shards := m.AlignRound(f[0] == "every")
		return fmt.Sprintf("add at %d to %v", target, shards)
	case "aligned":
		m.aligned(int(atoi(t, f[0])), atoi(t, f[1]))
		return "ok"
	case "land", "lent":
		v := shardapi.Version{Index: uint64(atoi(t, f[1])), Min: atoi(t, f[2])}
		if cmd == "land" {
			m.landed(int(atoi(t, f[0])), records.SliceRead{Version: v})
		} else {
			m.lent(int(atoi(t, f[0])), v)
		}
		r := m.Reads[atoi(t, f[0])]
		return fmt.Sprintf("read index=%d min=%d unchecked=%v", r.Index, r.Min, r.Unchecked)
	case "rejoin":
		m.rejoin()
		return "ok"
	case "join-fetch":
		return fmt.Sprintf("fetch %d", m.JoinFetch())
	}
	t.Fatalf("unknown command %q", cmd)
	return ""
}

// TestStepRefusalsInARowStop: the 20th refusal in a row stops the worker,
// counted like the others; an accepted push in between starts over.
func TestStepRefusalsInARowStop(t *testing.T) {
	m := NewStep(1, 1, 0)
	refused := errOf("non-finite")
	for i := 1; i <= 5; i++ {
		m.Settle(0, refused, false)
	}
	m.aligned(0, 1)
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
