package test

import (
	"fmt"
	"slices"
	"time"
)

// backTo80 fills Event.Back80 from the history's acknowledged pushes: the
// time from the fault until the mesh's acknowledgement rate over a 2 s
// window first reaches 80 % of its rate over the 10 s before the fault
// (zero: not within 60 s, or no rate before). Every worker's acks count
// (a killed victim has none to add).
func backTo80(h *History, events []Event) {
	var oks []int64
	for _, r := range h.Records {
		if r.Kind == "ok" && r.Samples > 0 {
			oks = append(oks, r.Nanos)
		}
	}
	slices.Sort(oks)
	count := func(from, to int64) int {
		i, _ := slices.BinarySearch(oks, from)
		j, _ := slices.BinarySearch(oks, to)
		return j - i
	}
	const before, win, step, horizon = 10 * time.Second, 2 * time.Second, 50 * time.Millisecond, 60 * time.Second
	for k := range events {
		e := &events[k]
		at := e.At.UnixNano()
		rate := float64(count(at-int64(before), at)) / before.Seconds()
		if rate == 0 {
			continue
		}
		for t := at; t < at+int64(horizon); t += int64(step) {
			if float64(count(t, t+int64(win))) >= 0.8*rate*win.Seconds() {
				// The window ends when the rate is reached: its end is
				// when the mesh is back, less the window a healthy mesh
				// also needs to be seen at that rate.
				e.Back80 = time.Duration(t - at)
				break
			}
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

// Suspicion is one suspension of a worker by a shard leader
// (shard/suspect.go) as the history shows it.
type Suspicion struct {
	Shard  uint32
	Worker string
	At     time.Time
	// Back is how long until the worker was added back to the shard (0:
	// never within the run).
	Back time.Duration
	// Alive: the worker's process went on after the suspension (it
	// pushed again without restarting) — a live worker suspended, whether
	// it was paused, cut off or merely slow.
	Alive bool
}

// Suspicions lists every suspension in the history, each once (replicas
// record the same entry).
func Suspicions(h *History) []Suspicion {
	type key struct {
		shard uint32
		index uint64
	}
	seen := map[key]bool{}
	var out []Suspicion
	for _, r := range h.Records {
		if r.Kind != "apply" || r.Entry != "remove-worker" || !r.Suspected || seen[key{r.Shard, r.Index}] {
			continue
		}
		seen[key{r.Shard, r.Index}] = true
		out = append(out, Suspicion{Shard: r.Shard, Worker: r.Worker, At: time.Unix(0, r.Nanos)})
	}
	for i := range out {
		s := &out[i]
		t := s.At.UnixNano()
		restarted, pushed := false, false
		for _, r := range h.Records {
			if r.Nanos <= t {
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
		s.Alive = pushed
	}
	return out
}

// SuspicionSummary is one line: suspensions, of live workers, and how long
// the live ones stayed out.
func SuspicionSummary(ss []Suspicion) string {
	var live []time.Duration
	for _, s := range ss {
		if s.Alive {
			live = append(live, s.Back)
		}
	}
	if len(live) == 0 {
		return fmt.Sprintf("suspensions %d, of live workers 0", len(ss))
	}
	slices.Sort(live)
	return fmt.Sprintf("suspensions %d, of live workers %d (out for p50 %.2fs, max %.2fs; 0 = not re-added in the run)",
		len(ss), len(live), quantile(live, 0.5).Seconds(), live[len(live)-1].Seconds())
}
