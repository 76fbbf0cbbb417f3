package clock

import (
	"cmp"
	"fmt"
	"slices"
)

// refGate is a naive reference of docs/design.md#the-gate-rules, written
// for clarity, not speed: every decision scans every worker. The real Gate
// is checked against it on random push sequences.
type refGate struct {
	pol     Policy
	floor   int64
	clock   map[WorkerID]int64
	times   map[WorkerID][]int64 // latest first, at most 2
	grant   map[WorkerID]int64
	waiting map[WorkerID]bool
}

func newRef(p Policy) *refGate {
	return &refGate{pol: p, clock: map[WorkerID]int64{}, times: map[WorkerID][]int64{},
		grant: map[WorkerID]int64{}, waiting: map[WorkerID]bool{}}
}

func (r *refGate) minMax() (lo, hi int64) {
	first := true
	for _, c := range r.clock {
		if first {
			lo, hi, first = c, c, false
		}
		lo, hi = min(lo, c), max(hi, c)
	}
	if first {
		return r.floor, r.floor
	}
	return lo, hi
}

func (r *refGate) add(w WorkerID) int64 {
	lo, _ := r.minMax()
	r.clock[w] = lo
	return lo
}

func (r *refGate) remove(w WorkerID) []Release {
	delete(r.clock, w)
	delete(r.times, w)
	delete(r.grant, w)
	delete(r.waiting, w)
	r.floor, _ = r.minMax()
	return r.release()
}

func (r *refGate) push(w WorkerID, iter, now int64) (Outcome, error) {
	c, ok := r.clock[w]
	if !ok || iter != c || r.waiting[w] {
		return Outcome{}, fmt.Errorf("rejected")
	}
	r.clock[w] = c + 1
	ts := r.times[w]
	if len(ts) > 0 && now < ts[0] {
		now = ts[0]
	}
	ts = append([]int64{now}, ts...)
	if len(ts) > 2 {
		ts = ts[:2]
	}
	r.times[w] = ts
	lo, hi := r.minMax()
	r.floor = lo
	tp := c + 1
	out := Outcome{Gap: tp - lo}
	sL, sU := r.pol.SL, r.pol.SL+r.pol.RMax
	paper := r.pol.Paradigm == DSSPPaper
	switch {
	case r.pol.Paradigm == ASP:
		out.Released, out.Rule = true, RuleAsync
	case r.grant[w] > 0 && (paper || out.Gap <= sU):
		r.grant[w]--
		out.Released, out.Rule = true, RuleGrant
	case out.Gap <= sL:
		out.Released, out.Rule = true, RuleWithin
	case tp == hi && r.pol.RMax > 0:
		out.ControllerCalled = true
		g := r.controller(w, lo)
		if !paper && g > sU-out.Gap+1 {
			g = sU - out.Gap + 1
		}
		if g > 0 {
			out.Released, out.Rule, out.Grant = true, RuleController, g
			r.grant[w] = g
			if !paper {
				r.grant[w] = g - 1
			}
		} else {
			out.Rule = RuleWait
		}
	default:
		out.Rule = RuleWait
	}
	if !out.Released {
		r.waiting[w] = true
	}
	out.Others = r.release()
	return out, nil
}

func (r *refGate) controller(p WorkerID, lo int64) int64 {
	if len(r.times[p]) < 2 {
		return 0
	}
	var ids []WorkerID
	for id, c := range r.clock {
		if c == lo {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	var best WorkerID
	var bestNext int64
	for _, id := range ids {
		ts := r.times[id]
		if len(ts) < 2 {
			return 0
		}
		next := 2*ts[0] - ts[1]
		if best == "" || next > bestNext {
			best, bestNext = id, next
		}
	}
	tp, ts := r.times[p], r.times[best]
	return naiveController(Timestamps{tp[0], tp[1]}, Timestamps{ts[0], ts[1]}, r.pol.RMax, r.pol.Objective)
}

func (r *refGate) release() []Release {
	lo, _ := r.minMax()
	var out []Release
	for id, w := range r.waiting {
		if w && r.clock[id]-lo <= r.pol.SL {
			r.waiting[id] = false
			out = append(out, Release{Worker: id, Iter: r.clock[id] - 1})
		}
	}
	slices.SortFunc(out, func(a, b Release) int {
		return cmp.Or(cmp.Compare(a.Iter, b.Iter), cmp.Compare(a.Worker, b.Worker))
	})
	return out
}

// naiveController is Algorithm 2 written as the paper states it: O(r_max²).
func naiveController(p, s Timestamps, rMax int64, obj Objective) int64 {
	ip, is := p.Latest-p.Previous, s.Latest-s.Previous
	best, bestCost := int64(0), int64(-1)
	for r := int64(0); r <= rMax; r++ {
		simP := p.Latest + r*ip
		cost := int64(-1)
		for k := int64(0); k <= rMax; k++ {
			simS := s.Latest + (k+1)*is
			var c int64
			if obj == ObjectiveWait {
				if simS < simP {
					continue
				}
				c = simS - simP
			} else {
				c = simS - simP
				if c < 0 {
					c = -c
				}
			}
			if cost < 0 || c < cost {
				cost = c
			}
			if obj == ObjectiveWait {
				break // the first k at or after simP is the wait
			}
		}
		if cost >= 0 && (bestCost < 0 || cost < bestCost) {
			best, bestCost = r, cost
		}
	}
	return best
}
