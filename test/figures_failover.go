package test

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// backTo80 fills Event.Back80 from the history's acknowledged pushes:
// for every surviving worker (one that acknowledged pushes in the 10 s
// before the fault and is not among Event.VictimIDs), the time from the
// fault until its acknowledgement rate over a 2 s window first reaches
// 80 % of its own rate over those 10 s; Back80 is the slowest survivor's
// (zero: one did not within 60 s, or no survivor had a rate before).
func backTo80(h *History, events []Event) {
	oks := map[string][]int64{}
	for _, r := range h.Records {
		if r.Kind == "ok" && r.Samples > 0 {
			oks[r.Node] = append(oks[r.Node], r.Nanos)
		}
	}
	for _, ts := range oks {
		slices.Sort(ts)
	}
	count := func(ts []int64, from, to int64) int {
		i, _ := slices.BinarySearch(ts, from)
		j, _ := slices.BinarySearch(ts, to)
		return j - i
	}
	const before, win, step, horizon = 10 * time.Second, 2 * time.Second, 50 * time.Millisecond, 60 * time.Second
	for k := range events {
		e := &events[k]
		at := e.At.UnixNano()
		var slowest time.Duration
		n := 0
		for w, ts := range oks {
			rate := float64(count(ts, at-int64(before), at)) / before.Seconds()
			if rate == 0 || slices.Contains(e.VictimIDs, w) {
				continue
			}
			n++
			back := time.Duration(-1)
			for t := at; t < at+int64(horizon); t += int64(step) {
				if float64(count(ts, t, t+int64(win))) >= 0.8*rate*win.Seconds() {
					back = time.Duration(t - at)
					break
				}
			}
			if back < 0 {
				slowest = -1
				break
			}
			slowest = max(slowest, back)
		}
		if slowest > 0 {
			e.Back80 = slowest
		} else if slowest == 0 && n > 0 {
			e.Back80 = time.Millisecond // back at once: shown as 0.00s
		}
	}
}

// afterLift is Recover counted from the end of the fault (heal, SIGCONT),
// for faults that last; Recover otherwise.
func (e Event) afterLift() time.Duration {
	if e.End.IsZero() || e.Recover == 0 {
		return e.Recover
	}
	return max(e.Recover-e.End.Sub(e.At), time.Millisecond)
}

// Removal is one removal of a worker from a shard's clock table as the
// history shows it: a suspension by the shard leader (shard/suspect.go) or
// a removal after gossip declared the node dead (or a graceful leave).
type Removal struct {
	Shard     uint32
	Worker    string
	At        time.Time
	Suspected bool // the leader's suspicion, not gossip's verdict
	// Back is how long until the worker was added back to the shard (0:
	// never within the run).
	Back time.Duration
	// Alive: the worker's process went on after the removal (it pushed
	// again without restarting) — a live worker removed, whether it was
	// paused, cut off or merely slow.
	Alive bool
	// During is the fault injected last before the removal ("" before
	// the first).
	During string
	// Victim: the worker's node is a victim of that fault (paused, cut
	// off, killed); a live worker that is not is a false suspicion
	// proper, a worker that was running normally.
	Victim bool
}

// Removals lists every removal in the history, each once (replicas record
// the same entry).
func Removals(h *History, events []Event) []Removal {
	type key struct {
		shard uint32
		index uint64
	}
	seen := map[key]bool{}
	var out []Removal
	for _, r := range h.Records {
		if r.Kind != "apply" || r.Entry != "remove-worker" || r.Err != "" || seen[key{r.Shard, r.Index}] {
			continue
		}
		seen[key{r.Shard, r.Index}] = true
		out = append(out, Removal{Shard: r.Shard, Worker: r.Worker, At: time.Unix(0, r.Nanos), Suspected: r.Suspected})
	}
	for i := range out {
		s := &out[i]
		t := s.At.UnixNano()
		for _, e := range events {
			if !e.At.After(s.At) {
				s.During = fmt.Sprintf("%s %v", e.Kind, e.Victims)
				s.Victim = slices.Contains(e.VictimIDs, s.Worker)
			}
		}
		// Alive: the process that had been pushing before the removal
		// pushed again after it. A node restarted before the removal
		// whose new process had not pushed yet was not alive then.
		restarted, pushed, pushedBefore := false, false, false
		for _, r := range h.Records {
			if r.Nanos <= t {
				if r.Node == s.Worker {
					switch r.Kind {
					case "start":
						pushedBefore = false
					case "invoke", "ok", "fail":
						pushedBefore = true
					}
				}
				continue
			}
			if s.Back == 0 && r.Kind == "apply" && r.Entry == "add-worker" && r.Shard == s.Shard && r.Worker == s.Worker {
				s.Back = time.Duration(r.Nanos - t)
			}
			if r.Node == s.Worker && !restarted && !pushed {
				switch r.Kind {
				case "start":
					restarted = true
				case "invoke", "ok", "fail":
					pushed = true
				}
			}
		}
		s.Alive = pushed && pushedBefore
	}
	return out
}

// RemovalSummary says how many workers were suspended and removed after
// gossip, how many of each were alive, how long those stayed out, and
// lists the live ones with the fault in progress.
func RemovalSummary(rs []Removal) string {
	var b strings.Builder
	for _, sus := range []bool{true, false} {
		name := "suspensions by shard leaders"
		if !sus {
			name = "removals after gossip or leave"
		}
		var n int
		var live, bystanders []time.Duration
		for _, r := range rs {
			if r.Suspected != sus {
				continue
			}
			n++
			if r.Alive {
				live = append(live, r.Back)
				if !r.Victim {
					bystanders = append(bystanders, r.Back)
				}
			}
		}
		fmt.Fprintf(&b, "%s: %d, of live workers %d", name, n, len(live))
		if len(live) > 0 {
			slices.Sort(live)
			fmt.Fprintf(&b, " (out for p50 %.2fs, max %.2fs)", quantile(live, 0.5).Seconds(), live[len(live)-1].Seconds())
		}
		fmt.Fprintf(&b, "; of live workers not among the fault's victims %d", len(bystanders))
		if len(bystanders) > 0 {
			slices.Sort(bystanders)
			fmt.Fprintf(&b, " (out for p50 %.2fs, max %.2fs)", quantile(bystanders, 0.5).Seconds(), bystanders[len(bystanders)-1].Seconds())
		}
		b.WriteString("\n")
	}
	for _, r := range rs {
		if r.Alive {
			who := "a victim"
			if !r.Victim {
				who = "NOT a victim"
			}
			fmt.Fprintf(&b, "  live worker %s out of shard %d at %s for %.2fs (suspected %v, %s) during %s\n",
				r.Worker, r.Shard, r.At.Format("15:04:05.000"), r.Back.Seconds(), r.Suspected, who, r.During)
		}
	}
	return b.String()
}
