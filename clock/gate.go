package clock

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Rule says which rule of docs/design.md#the-gate-rules decided a push.
type Rule uint8

const (
	RuleAsync      Rule = iota + 1 // ASP: every push is released at once
	RuleGrant                      // rule 1: an earlier grant covers this push
	RuleWithin                     // rule 2: gap <= s_L
	RuleController                 // rule 3: the controller granted r* > 0
	RuleWait                       // rule 4: held until gap <= s_L
)

func (r Rule) String() string {
	switch r {
	case RuleAsync:
		return "async"
	case RuleGrant:
		return "grant"
	case RuleWithin:
		return "within"
	case RuleController:
		return "controller"
	case RuleWait:
		return "wait"
	}
	return fmt.Sprintf("rule(%d)", uint8(r))
}

// Release is a held push released now: the worker may proceed past Iter.
type Release struct {
	Worker WorkerID
	Iter   int64 // the iteration of the push being released (its clock − 1)
}

// Outcome is what one applied push decided.
type Outcome struct {
	// Released is true if the pusher may proceed now; otherwise it waits
	// until it appears in the Released list of a later Outcome or removal.
	Released bool
	Rule     Rule
	// Gap is the pusher's t_p − t_min after the push was applied.
	Gap int64
	// ControllerCalled is true if the controller ran for this push.
	ControllerCalled bool
	// Grant is r* when the controller granted this push (0 otherwise): for
	// dssp this push and the next r*−1 are released; for dssp-paper this
	// push and the next r*.
	Grant int64
	// Others are the other waiting workers this push released, ordered by
	// (Iter, Worker).
	Others []Release
}

// Stats are counters kept per worker and for the whole gate.
type Stats struct {
	Pushes          uint64 // pushes applied
	Waits           uint64 // pushes held (rule 4)
	ControllerCalls uint64 // controller invocations
	Grants          uint64 // controller invocations that granted r* > 0
	GrantedPushes   uint64 // sum of r* over those grants
}

// WorkerInfo is a read-only view of one worker, for metrics and status.
type WorkerInfo struct {
	ID      WorkerID
	Clock   int64
	Gap     int64 // Clock − t_min
	Grant   int64 // r_i: pushes still covered by a grant
	Waiting bool  // its push Clock−1 is held
	// Times holds the receipt times of its latest pushes; NTimes (0..2) says
	// how many are known.
	Times  Timestamps
	NTimes int
	Stats  Stats
}

// Gate is the synchronization gate of one shard: the clock table, the
// push-timestamp table, the grants and the held pushes. See the package doc
// for the contract; it is not safe for concurrent use.
//
// Per-worker state lives in ws, indexed by the worker's dense index in the
// table (one map lookup per call, on the id; slice indexing after that).
type Gate struct {
	pol   Policy
	table *Table
	ws    []worker // by table index; a free index holds a zero worker
	// The waiting workers whose clock is c are in the wait list of the
	// table's bucket at c. Every waiter has c > swept, and swept = t_min +
	// s_L as of the last sweep.
	nWaiting int
	swept    int64
	floor    int64 // t_min; kept when the table empties, for the next AddWorker
	totals   Stats
	slow     slowest
	// rank[i] is index i's place in the order of the live ids, for
	// ordering releases by id with integer compares; rebuilt when stale.
	rank      []int32
	rankStale bool
	sortBuf   []uint64 // scratch for sortByRank
}

type worker struct {
	times   Timestamps
	nTimes  uint8
	waiting bool
	grant   int64
	stats   Stats
}

// slowest caches, for the workers at clock floor, how many have fewer than
// two timestamps (cold) and which of the others is the slowest (the
// controller's s). It is valid while ok and floor == Gate.floor. The set at
// t_min only shrinks while t_min stays (a worker there leaves by pushing,
// being advanced or removed; see leaveFloor), and a worker's timestamps
// change only when it pushes, which moves it off t_min; so the cache
// survives until t_min rises, a worker is added at t_min, or the slowest
// itself leaves. Rebuilding it is a scan of the workers at t_min.
type slowest struct {
	ok    bool
	floor int64
	cold  int
	idx   int32 // -1 when every worker at t_min is cold
	next  int64 // its predicted next push A[s][0] + I_s
}

// NewGate returns an empty gate for p.
func NewGate(p Policy) (*Gate, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &Gate{
		pol:   p,
		table: NewTable(),
		swept: p.SL,
	}, nil
}

// Policy returns the gate's policy.
func (g *Gate) Policy() Policy { return g.pol }

// Len is the number of live workers.
func (g *Gate) Len() int { return g.table.Len() }

// Min is t_min (for an empty gate, the t_min it had when it emptied).
func (g *Gate) Min() int64 { return g.floor }

// Max is t_max (t_min for an empty gate).
func (g *Gate) Max() int64 {
	if g.table.Len() == 0 {
		return g.floor
	}
	return g.table.Max()
}

// Clock returns w's clock: the iteration its next push must carry.
func (g *Gate) Clock(w WorkerID) (int64, bool) { return g.table.Clock(w) }

// IsWaiting reports whether w's latest push is held.
func (g *Gate) IsWaiting(w WorkerID) bool {
	i, ok := g.table.lookup(w)
	return ok && g.ws[i].waiting
}

// Totals are the gate's counters over all workers, removed ones included.
func (g *Gate) Totals() Stats { return g.totals }

// Workers returns the live workers sorted by id.
func (g *Gate) Workers() []WorkerID {
	ids := make([]WorkerID, 0, g.table.Len())
	for id := range g.table.index {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Waiting returns the held pushes ordered by (Iter, Worker).
func (g *Gate) Waiting() []Release {
	out := make([]Release, 0, g.nWaiting)
	for b := g.table.head; b != nil; b = b.next {
		for _, i := range b.wait {
			out = append(out, Release{Worker: g.table.ids[i], Iter: b.clock - 1})
		}
	}
	sortReleases(out)
	return out
}

// Worker returns the view of w.
func (g *Gate) Worker(w WorkerID) (WorkerInfo, bool) {
	i, ok := g.table.lookup(w)
	if !ok {
		return WorkerInfo{}, false
	}
	st, c := &g.ws[i], g.table.clock(i)
	return WorkerInfo{
		ID: w, Clock: c, Gap: c - g.floor, Grant: st.grant, Waiting: st.waiting,
		Times: st.times, NTimes: int(st.nTimes), Stats: st.stats,
	}, true
}

// AddWorker adds w at clock t_min (0 for a new gate) and returns that
// clock: the iteration of w's first push. A returning worker starts afresh:
// no timestamps, no grant.
func (g *Gate) AddWorker(w WorkerID) (int64, error) {
	if _, err := g.add(w, g.floor); err != nil {
		return 0, err
	}
	if g.table.Len() == 1 {
		g.swept = g.floor + g.pol.SL
	}
	return g.floor, nil
}

// add puts w in the table at clock c with a fresh worker state.
func (g *Gate) add(w WorkerID, c int64) (int32, error) {
	i, err := g.table.add(w, c)
	if err != nil {
		return 0, err
	}
	if int(i) == len(g.ws) {
		g.ws = append(g.ws, worker{})
		g.rank = append(g.rank, 0)
	} else {
		g.ws[i] = worker{}
	}
	g.rankStale = true
	if c == g.floor {
		g.slow.ok = false
	}
	return i, nil
}

// AdvanceWorker moves w's clock forward to c, as if w had pushed the
// iterations in between with nothing in them: a worker re-added to one
// shard at that shard's t_min, above where its other shards have it, is
// advanced there so that its clock is the same on every shard (otherwise
// two workers each ahead on one shard and behind on another can hold each
// other for good). A held push of w is dropped. It returns w's clock
// (unchanged if already at or past c) and the workers released because
// t_min rose, ordered by (Iter, Worker).
func (g *Gate) AdvanceWorker(w WorkerID, c int64) (int64, []Release, error) {
	i, ok := g.table.lookup(w)
	if !ok {
		return 0, nil, &UnknownWorkerError{Worker: w}
	}
	cur := g.table.clock(i)
	if c <= cur {
		return cur, nil, nil
	}
	if g.ws[i].waiting {
		g.unwait(i)
	}
	g.leaveFloor(i, cur)
	g.table.remove(i)
	if _, err := g.add(w, c); err != nil {
		return 0, nil, err
	}
	g.floor = g.table.Min()
	return c, g.sweep(nil), nil
}

// RemoveWorker removes w (declared dead, or leaving). A push of w that was
// held is dropped, not released. It returns the other workers released
// because t_min rose, ordered by (Iter, Worker).
func (g *Gate) RemoveWorker(w WorkerID) ([]Release, error) {
	i, ok := g.table.lookup(w)
	if !ok {
		return nil, &UnknownWorkerError{Worker: w}
	}
	c := g.table.clock(i)
	if g.ws[i].waiting {
		g.unwait(i)
	}
	g.leaveFloor(i, c)
	g.table.remove(i)
	g.ws[i] = worker{}
	g.rankStale = true
	if g.table.Len() > 0 {
		g.floor = g.table.Min()
	}
	return g.sweep(nil), nil
}

// Push applies w's push for iteration iter received at recvNanos and
// decides it. On error nothing changed.
func (g *Gate) Push(w WorkerID, iter int64, recvNanos int64) (Outcome, error) {
	i, ok := g.table.lookup(w)
	if !ok {
		return Outcome{}, &UnknownWorkerError{Worker: w}
	}
	var out Outcome
	err := g.push(i, iter, recvNanos, &out)
	return out, err
}

// Slot is a live worker's place in the gate, for a caller that pushes for
// the same workers very many times (the simulator): PushSlot skips Push's
// lookup of the id. A slot is w's from AddWorker until w is removed or
// advanced (AdvanceWorker) or the gate replaced (UnmarshalBinary); then a
// slot may name another worker or none. Slots are a numbering of this
// gate object only: they are not in the State, the encoding or any
// decision, and a restored gate numbers its workers otherwise.
type Slot int32

// Slot returns w's slot.
func (g *Gate) Slot(w WorkerID) (Slot, bool) {
	i, ok := g.table.lookup(w)
	return Slot(i), ok
}

// PushSlot is Push for the worker in slot s (see Slot). A slot of no live
// worker is an *UnknownWorkerError with an empty Worker.
func (g *Gate) PushSlot(s Slot, iter int64, recvNanos int64) (Outcome, error) {
	var out Outcome
	err := g.PushSlotInto(s, iter, recvNanos, &out)
	return out, err
}

// PushSlotInto is PushSlot writing the outcome into *out, for a caller in
// a loop that is done with each outcome before its next push: the backing
// array of out.Others is reused (overwritten), so a steady caller
// allocates nothing, and no Outcome is copied on the way out. With no
// releases Others has length 0 (nil only if it was nil). On error *out is
// unchanged.
func (g *Gate) PushSlotInto(s Slot, iter int64, recvNanos int64, out *Outcome) error {
	if s < 0 || int(s) >= len(g.table.bk) || g.table.bk[s] == nil {
		return &UnknownWorkerError{}
	}
	return g.push(int32(s), iter, recvNanos, out)
}

// push is Push for index i, into *out (whose Others array it reuses).
func (g *Gate) push(i int32, iter int64, recvNanos int64, out *Outcome) error {
	st, c := &g.ws[i], g.table.clock(i)
	switch {
	case iter < c:
		return &DuplicatePushError{Worker: g.table.ids[i], Iter: iter, Clock: c}
	case iter > c:
		return &FuturePushError{Worker: g.table.ids[i], Iter: iter, Clock: c}
	case st.waiting:
		return fmt.Errorf("%w: %q pushed iteration %d while iteration %d is held", ErrWorkerWaiting, g.table.ids[i], iter, iter-1)
	}

	g.leaveFloor(i, c)
	tp := g.table.advance(i)
	g.floor = g.table.Min()
	if st.nTimes > 0 {
		recvNanos = max(recvNanos, st.times.Latest)
	}
	st.times = Timestamps{Latest: recvNanos, Previous: st.times.Latest}
	st.nTimes = min(st.nTimes+1, 2)
	st.stats.Pushes++
	g.totals.Pushes++

	others := out.Others[:0]
	*out = Outcome{Gap: tp - g.floor}
	g.decide(st, tp, out)
	if !out.Released {
		st.waiting = true
		g.addWaiter(i)
		st.stats.Waits++
		g.totals.Waits++
	}
	out.Others = g.sweep(others)
	return nil
}

// decide applies rules 1–4 of docs/design.md#the-gate-rules (or
// Algorithm 1 for dssp-paper) to the pusher st, whose clock is now tp.
func (g *Gate) decide(st *worker, tp int64, out *Outcome) {
	if g.pol.Paradigm == ASP {
		out.Released, out.Rule = true, RuleAsync
		return
	}
	gap, sL, sU := out.Gap, g.pol.SL, g.pol.SU()
	paper := g.pol.Paradigm == DSSPPaper
	switch {
	case st.grant > 0 && (paper || gap <= sU):
		st.grant--
		out.Released, out.Rule = true, RuleGrant
		return
	case gap <= sL:
		out.Released, out.Rule = true, RuleWithin
		return
	}
	out.Rule = RuleWait
	if tp != g.table.Max() || g.pol.RMax == 0 {
		return
	}
	out.ControllerCalled = true
	st.stats.ControllerCalls++
	g.totals.ControllerCalls++
	r := g.controller(st)
	if !paper {
		r = min(r, sU-gap+1)
	}
	if r <= 0 {
		return
	}
	out.Released, out.Rule, out.Grant = true, RuleController, r
	st.grant = r
	if !paper {
		st.grant = r - 1
	}
	st.stats.Grants++
	st.stats.GrantedPushes += uint64(r)
	g.totals.Grants++
	g.totals.GrantedPushes += uint64(r)
}

// controller runs SyncController for p against the slowest worker: the one
// at t_min whose predicted next push A[s][0] + I_s is latest, ties to the
// smallest id. It returns 0 (cold start) unless p and every worker at t_min
// have two timestamps: a worker without them has no prediction and could
// be the slowest. Cost: O(r_max), plus a scan of the workers at t_min when
// the cache of the slowest is stale (see slowest).
func (g *Gate) controller(st *worker) int64 {
	if st.nTimes < 2 {
		return 0
	}
	if !g.slow.ok || g.slow.floor != g.floor {
		g.findSlowest()
	}
	if g.slow.cold > 0 || g.slow.idx < 0 {
		return 0
	}
	return SyncController(st.times, g.ws[g.slow.idx].times, g.pol.RMax, g.pol.Objective)
}

// findSlowest rebuilds the cache of the slowest worker at t_min.
func (g *Gate) findSlowest() {
	s := slowest{ok: true, floor: g.floor, idx: -1}
	for _, i := range g.table.at(g.floor) { // the head: O(1)
		w := &g.ws[i]
		if w.nTimes < 2 {
			s.cold++
			continue
		}
		next := satAdd(w.times.Latest, w.times.interval())
		if s.idx < 0 || next > s.next || (next == s.next && g.table.ids[i] < g.table.ids[s.idx]) {
			s.idx, s.next = i, next
		}
	}
	g.slow = s
}

// leaveFloor keeps the cache of the slowest true when worker i, at clock c,
// is about to leave clock c (push, advance or removal), before its
// timestamps change.
func (g *Gate) leaveFloor(i int32, c int64) {
	if !g.slow.ok || g.slow.floor != c {
		return
	}
	switch {
	case g.ws[i].nTimes < 2:
		g.slow.cold--
	case i == g.slow.idx:
		g.slow.ok = false
	}
}

// addWaiter records index i as waiting at its clock.
func (g *Gate) addWaiter(i int32) {
	b := g.table.bk[i]
	b.wait = append(b.wait, i)
	g.nWaiting++
}

// sweep releases every waiter with clock <= t_min + s_L (rule 4), ordered
// by (Iter, Worker): the buckets in clock order, each bucket's waiters by
// rank. It appends them to out and returns it.
func (g *Gate) sweep(out []Release) []Release {
	thr := g.floor + g.pol.SL
	if thr <= g.swept {
		return out
	}
	g.swept = thr
	if g.nWaiting == 0 {
		return out
	}
	for b := g.table.head; b != nil && b.clock <= thr; b = b.next {
		if len(b.wait) == 0 {
			continue
		}
		g.sortByRank(b.wait)
		for _, i := range b.wait {
			g.ws[i].waiting = false
			out = append(out, Release{Worker: g.table.ids[i], Iter: b.clock - 1})
		}
		g.nWaiting -= len(b.wait)
		b.wait = b.wait[:0]
	}
	return out
}

// sortByRank sorts indices into the order of their ids.
func (g *Gate) sortByRank(is []int32) {
	if len(is) < 2 {
		return
	}
	if g.rankStale {
		live := make([]int32, 0, g.table.Len())
		for i, id := range g.table.ids {
			if id != "" {
				live = append(live, int32(i))
			}
		}
		slices.SortFunc(live, func(a, b int32) int { return strings.Compare(string(g.table.ids[a]), string(g.table.ids[b])) })
		for r, i := range live {
			g.rank[i] = int32(r)
		}
		g.rankStale = false
	}
	// Sort rank<<32 | index as plain integers: no compare callback.
	keys := g.sortBuf[:0]
	for _, i := range is {
		keys = append(keys, uint64(g.rank[i])<<32|uint64(uint32(i)))
	}
	slices.Sort(keys)
	for k, key := range keys {
		is[k] = int32(uint32(key))
	}
	g.sortBuf = keys
}

// unwait drops index i, waiting at its clock, from the waiters.
func (g *Gate) unwait(i int32) {
	b := g.table.bk[i]
	k := slices.Index(b.wait, i)
	b.wait = slices.Delete(b.wait, k, k+1)
	g.ws[i].waiting = false
	g.nWaiting--
}

func sortReleases(rs []Release) {
	slices.SortFunc(rs, func(a, b Release) int {
		if c := cmp.Compare(a.Iter, b.Iter); c != 0 {
			return c
		}
		return cmp.Compare(a.Worker, b.Worker)
	})
}
