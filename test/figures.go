package test

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"dsspmesh/node/records"
	"dsspmesh/node/status"
)

// Event is one injected fault and what the harness measured around it.
// Durations are from At; zero means not measured for this kind of fault.
type Event struct {
	Kind    string
	Victims []int
	At      time.Time
	End     time.Time     // when the fault was lifted (heal, SIGCONT, restart); zero for a kill
	Detect  time.Duration // survivors' membership no longer lists the victims
	Elect   time.Duration // every shard led by a survivor
	Recover time.Duration // every surviving worker advanced a few iterations
	// Filled from the history by Figures: the first acknowledged push (any
	// shard, any worker) after the fault and after every shard acknowledged
	// again; iterations per second over the 10 s before and after.
	FirstAck, AllShardsAck time.Duration
	RateBefore, RateAfter  float64
	// Back80: until every surviving worker's acknowledgement rate is back
	// to 80 % of its rate in the 10 s before (figures_failover.go);
	// VictimIDs are the victims' node ids (report fills them).
	Back80    time.Duration
	VictimIDs []string
}

// measure polls every condition until all hold (or limit passes, failing
// the test) and returns how long each took to hold first.
func (c *FaultCluster) measure(what string, limit time.Duration, conds map[string]func() bool) map[string]time.Duration {
	c.t.Helper()
	start := time.Now()
	out := map[string]time.Duration{}
	c.WaitFor(what, limit, func() bool {
		for name, cond := range conds {
			if _, done := out[name]; !done && cond() {
				out[name] = time.Since(start)
			}
		}
		return len(out) == len(conds)
	})
	return out
}

// membersAre reports whether node i's membership is exactly want.
func (c *FaultCluster) membersAre(i int, want []int) bool {
	s, err := c.Status(i)
	if err != nil || len(s.Members) != len(want) {
		return false
	}
	ids := []string{}
	for _, w := range want {
		ids = append(ids, c.IDs[w])
	}
	for _, m := range s.Members {
		if !slices.Contains(ids, m.ID) {
			return false
		}
	}
	return true
}

// ledBy reports whether, in the views of nodes, every shard has a leader
// and it is one of allowed.
func (c *FaultCluster) ledBy(nodes, allowed []int) bool {
	st := make([]*status.Status, len(c.Mesh.Procs))
	shards := 0
	for _, i := range nodes {
		s, err := c.Status(i)
		if err != nil {
			return false
		}
		st[i] = &s
		shards = len(s.Shards)
	}
	leaders := Leaders(st)
	if len(leaders) != shards || shards == 0 {
		return false
	}
	for _, i := range leaders {
		if !slices.Contains(allowed, i) {
			return false
		}
	}
	return true
}

// fullyReplicated reports whether every shard's leader among nodes has
// at least want voters, and every one of those voters among nodes holds
// that configuration too. A leader reports its latest configuration as
// soon as it appends it; until the voters have it, a fault can still
// leave the shard with the old, smaller one.
func (c *FaultCluster) fullyReplicated(nodes []int, want int) bool {
	byID := map[string]*status.Status{}
	var statuses []*status.Status
	for _, i := range nodes {
		s, err := c.Status(i)
		if err != nil {
			return false
		}
		byID[s.Node] = &s
		statuses = append(statuses, &s)
	}
	full := map[uint32]bool{}
	shards := 0
	for _, s := range statuses {
		shards = len(s.Shards)
		for _, sh := range s.Shards {
			if sh.Local != "leader" || len(sh.Voters) < want || !votersAgree(byID, sh, want) {
				continue
			}
			full[sh.ID] = true
		}
	}
	return shards > 0 && len(full) == shards
}

// votersAgree reports whether every voter of the leader's shard status sh
// that is in byID hosts the shard with at least want voters.
func votersAgree(byID map[string]*status.Status, sh records.ShardStatus, want int) bool {
	for _, v := range sh.Voters {
		s := byID[v]
		if s == nil {
			continue
		}
		ok := false
		for _, o := range s.Shards {
			if o.ID == sh.ID && o.Local != "" && len(o.Voters) >= want {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// progressed returns a condition: every node in nodes is n iterations past
// where it was when progressed was called.
func (c *FaultCluster) progressed(nodes []int, n int64) func() bool {
	base := c.Iters(nodes)
	return func() bool {
		done := true
		for _, i := range nodes {
			it := c.Iter(i)
			if it >= 0 && it < base[i] {
				base[i] = it // the node restarted: its count began again
			}
			if it < base[i]+n {
				done = false
			}
		}
		return done
	}
}

// Figures fills each event's history-based figures.
func Figures(h *History, events []Event) {
	type ok struct {
		t     int64
		shard uint32
	}
	var oks []ok
	shards := map[uint32]bool{}
	for _, r := range h.Records {
		if r.Kind == "ok" && r.Samples > 0 {
			oks = append(oks, ok{r.Nanos, r.Shard})
			shards[r.Shard] = true
		}
	}
	n := float64(max(len(shards), 1))
	const window = 10 * time.Second
	for k := range events {
		e := &events[k]
		at := e.At.UnixNano()
		seen := map[uint32]bool{}
		var before, after int
		for _, o := range oks {
			switch {
			case o.t >= at-int64(window) && o.t < at:
				before++
			case o.t >= at && o.t < at+int64(window):
				after++
			}
			if o.t < at || len(seen) == len(shards) {
				continue
			}
			if len(seen) == 0 {
				e.FirstAck = time.Duration(o.t - at)
			}
			seen[o.shard] = true
			if len(seen) == len(shards) {
				e.AllShardsAck = time.Duration(o.t - at)
			}
		}
		e.RateBefore = float64(before) / n / window.Seconds()
		e.RateAfter = float64(after) / n / window.Seconds()
	}
	backTo80(h, events)
}

// FigureTable prints the events and, per kind, p50/p99 of each duration.
func FigureTable(events []Event) string {
	var b strings.Builder
	ms := func(d time.Duration) string {
		if d == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
	fmt.Fprintf(&b, "%-26s %-8s %8s %8s %8s %9s %9s %13s\n", "fault", "victims", "detect", "elect", "1st ack", "all acks", "recover", "iters/s b→a")
	for _, e := range events {
		fmt.Fprintf(&b, "%-26s %-8s %8s %8s %8s %9s %9s %6.2f→%-6.2f\n", e.Kind, fmt.Sprint(e.Victims), ms(e.Detect), ms(e.Elect),
			ms(e.FirstAck), ms(e.AllShardsAck), ms(e.Recover), e.RateBefore, e.RateAfter)
	}
	kinds := map[string][]Event{}
	var order []string
	for _, e := range events {
		if _, ok := kinds[e.Kind]; !ok {
			order = append(order, e.Kind)
		}
		kinds[e.Kind] = append(kinds[e.Kind], e)
	}
	fmt.Fprintf(&b, "\nper kind (p50 / p99 over n): detect, elect, all shards acking, recover, recover after the fault lifted, rate back to 80%%; throughput dip\n")
	for _, k := range order {
		es := kinds[k]
		pick := func(f func(Event) time.Duration) string {
			var v []time.Duration
			for _, e := range es {
				if d := f(e); d > 0 {
					v = append(v, d)
				}
			}
			if len(v) == 0 {
				return "-"
			}
			slices.Sort(v)
			return fmt.Sprintf("%s/%s", ms(quantile(v, 0.5)), ms(quantile(v, 0.99)))
		}
		var dip float64
		for _, e := range es {
			if e.RateBefore > 0 {
				dip += 1 - e.RateAfter/e.RateBefore
			}
		}
		fmt.Fprintf(&b, "%-26s n=%-3d detect %-13s elect %-13s acks %-13s recover %-13s lifted %-13s 80%% %-13s dip %3.0f%%\n", k, len(es),
			pick(func(e Event) time.Duration { return e.Detect }), pick(func(e Event) time.Duration { return e.Elect }),
			pick(func(e Event) time.Duration { return e.AllShardsAck }), pick(func(e Event) time.Duration { return e.Recover }),
			pick(Event.afterLift), pick(func(e Event) time.Duration { return e.Back80 }),
			100*dip/float64(len(es)))
	}
	return b.String()
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(q * float64(len(sorted)-1))
	if float64(i) < q*float64(len(sorted)-1) {
		i++
	}
	return sorted[min(i, len(sorted)-1)]
}
