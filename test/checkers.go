package test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"dsspmesh/clock"
	"dsspmesh/node/status"
)

// History is everything the nodes of one run wrote under --history-dir
// (node/status/history.go has the record format).
type History struct {
	Records []status.HistoryRecord
}

// ReadHistory reads every node's file in dir. A torn last line (the node
// was killed mid-write) is skipped. The nodes may still be running, and
// the files are read one after the other: a record is kept only if it is
// older than a second before the reading began, so that everything it
// depends on (an application recorded before the acknowledgement it
// allowed, in another node's file) was on disk before any file was read.
func ReadHistory(dir string) (*History, error) {
	cutoff := time.Now().Add(-time.Second).UnixNano()
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, err
	}
	h := &History{}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			var r status.HistoryRecord
			if json.Unmarshal(sc.Bytes(), &r) == nil && r.Nanos <= cutoff {
				h.Records = append(h.Records, r)
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	sort.SliceStable(h.Records, func(i, j int) bool { return h.Records[i].Nanos < h.Records[j].Nanos })
	return h, nil
}

// Report is what the checkers found. Every count named as a violation must
// be zero in a correct system; Violations holds the first few examples.
type Report struct {
	Acked          int // acknowledged pushes carrying samples
	Lost           int // violation: acknowledged and never applied
	AppliedTwice   int // violation: applied at two indices in one membership of the worker
	ClockBack      int // violation: a push applied below its worker's clock
	GapOver        int // violation: acknowledged with gap > s_U, or acknowledged while held
	MaxGap         int64
	SU             int64 // the read bound, the job policy's s_U; -1: unbounded policy
	GateSU         int64 // the bound on the gap at release: SU, or SU−1 under --pipeline; -1: unbounded
	TwoLeaders     int   // violation: more than one node led a (shard, term)
	Terms          int   // (shard, term) pairs with a leader record
	HashMismatch   int   // violation: replicas differ in state at one index
	HashCompared   int   // (shard, index) checkpoints seen on ≥ 2 replicas
	NonFinite      int   // violation: a replica held a NaN or ±Inf parameter at a checkpoint
	FiniteChecked  int   // replica checkpoints whose parameters were checked
	Disagree       int   // violation: replicas recorded different outcomes at one index
	ReplayMismatch int   // violation: the gate replayed from the log decides otherwise
	Replayed       int   // pushes replayed
	Duplicates     int   // resends answered by dedupe (not a violation)
	Reads          int   // (iteration, shard) slice versions checked against the bound
	ReadsUnchecked int   // slices read outside the gate (join's fetch, before an align): not covered
	ReadStale      int   // violation: an iteration computed on a slice missing more than s_U iterations
	ReadOverclaim  int   // violation: a slice's version claims a t_min above the log's at its index
	MaxReadLag     int64 // largest iteration − version t_min seen
	// The balance layer's shares of the global batch (shares.go).
	ShareRounds int   // iterations with acknowledged shares
	ShareShort  int   // of them, iterations whose global batch was partly unread
	MaxShortRun int64 // longest run of consecutive such iterations
	ShareTiling int   // violation: shares overlap in the data order, or one iteration mixes allocations
	ShareUnread int   // violation: an iteration short of its global batch that no departure explains
	ShortRuns   []ShortRun
	// The agreement check (docs/design.md, "Replicas agree"): replicas
	// whose state hash differed from a majority's at a checkpoint, and the
	// product's own word of a replica that diverged ("diverged" records).
	Diverging  int // (shard, replica) pairs in a minority at some checkpoint
	Named      int // (shard, replica) pairs the product named diverged
	Unnamed    int // violation: in a minority and not named within two check periods
	FalseAlarm int // violation: named diverged (its digest) and never in a minority
	Violations []string
}

// OK reports whether no checker found a violation.
func (r *Report) OK() bool {
	return r.Lost+r.AppliedTwice+r.ClockBack+r.GapOver+r.TwoLeaders+r.HashMismatch+r.Disagree+r.ReplayMismatch+r.NonFinite+
		r.ReadStale+r.ReadOverclaim+r.ShareTiling+r.ShareUnread+r.Unnamed+r.FalseAlarm == 0
}

func (r *Report) String() string {
	return fmt.Sprintf("acked %d, lost %d, applied twice %d, clock back %d, gap over the gate's s_U %d (max gap %d, gate's s_U %d, reads' s_U %d), "+
		"two leaders %d of %d terms, hash mismatches %d of %d checkpoints, replica disagreements %d, "+
		"replay mismatches %d of %d pushes, dedupe answers %d, non-finite parameters at %d of %d replica checkpoints, "+
		"reads beyond the bound %d of %d (max lag %d, %d unchecked), versions overclaimed %d, "+
		"shares overlapping %d, batches short and unexplained %d (short %d of %d iterations, longest run %d), "+
		"replicas diverging %d, named %d, unnamed %d, false alarms %d",
		r.Acked, r.Lost, r.AppliedTwice, r.ClockBack, r.GapOver, r.MaxGap, r.GateSU, r.SU, r.TwoLeaders, r.Terms,
		r.HashMismatch, r.HashCompared, r.Disagree, r.ReplayMismatch, r.Replayed, r.Duplicates, r.NonFinite, r.FiniteChecked,
		r.ReadStale, r.Reads, r.MaxReadLag, r.ReadsUnchecked, r.ReadOverclaim,
		r.ShareTiling, r.ShareUnread, r.ShareShort, r.ShareRounds, r.MaxShortRun,
		r.Diverging, r.Named, r.Unnamed, r.FalseAlarm)
}

func (r *Report) violate(format string, args ...any) {
	if len(r.Violations) < 20 {
		r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
	}
}

type pushKey struct {
	shard  uint32
	worker string
	iter   int64
}

// Check runs every checker over the history of a run of policy (e.g.
// "dssp:3:12"), with the job's --pipeline: the gate then releases by
// policy's clock.Policy.Pipelined (s_L − 1), which the replay and the gap
// at release are judged by, while the reads keep policy's s_U
// (docs/design.md, "The read guarantee").
func (h *History) Check(policy string, pipeline bool) (*Report, error) {
	pol, err := clock.ParsePolicy(policy)
	if err != nil {
		return nil, err
	}
	gatePol := pol
	if pipeline {
		if gatePol, err = pol.Pipelined(); err != nil {
			return nil, err
		}
	}
	rep := &Report{SU: -1, GateSU: -1}
	if pol.Bounded() {
		rep.SU, rep.GateSU = pol.SU(), gatePol.SU()
	}
	logs := h.mergedLogs(rep)
	h.checkLeaders(rep)
	h.checkHashes(rep)
	h.checkAgreement(rep)
	h.checkFinite(rep)
	releases := map[pushKey][]release{} // every release of a push, in log order
	applies := map[pushKey][]int64{}    // times an application of the push was first recorded
	mins := map[uint32]map[uint64]int64{}
	for s, entries := range logs {
		mins[s] = map[uint64]int64{}
		replayShard(rep, gatePol, s, entries, releases, applies, h.applyTimes(s), mins[s])
	}
	h.checkAcks(rep, releases, applies)
	h.checkReads(rep, mins)
	h.checkShares(rep, pipeline)
	return rep, nil
}

// mergedLogs returns each shard's applied entries by index, one record per
// index (replicas that applied it must agree; a replica restored from a
// snapshot has none for the indices before it).
func (h *History) mergedLogs(rep *Report) map[uint32][]status.HistoryRecord {
	byIndex := map[uint32]map[uint64]status.HistoryRecord{}
	for _, r := range h.Records {
		if r.Kind != "apply" {
			continue
		}
		m := byIndex[r.Shard]
		if m == nil {
			m = map[uint64]status.HistoryRecord{}
			byIndex[r.Shard] = m
		}
		if prev, ok := m[r.Index]; ok {
			if a, b := outcomeText(prev), outcomeText(r); a != b {
				rep.Disagree++
				rep.violate("shard %d index %d: %s applied %s, %s applied %s", r.Shard, r.Index, prev.Node, a, r.Node, b)
			}
			continue
		}
		m[r.Index] = r
	}
	out := map[uint32][]status.HistoryRecord{}
	for s, m := range byIndex {
		for _, r := range m {
			out[s] = append(out[s], r)
		}
		slices.SortFunc(out[s], func(a, b status.HistoryRecord) int { return int(a.Index) - int(b.Index) })
	}
	return out
}

// applyTimes is, per (shard, index), the earliest time any replica
// recorded applying it.
func (h *History) applyTimes(s uint32) map[uint64]int64 {
	out := map[uint64]int64{}
	for _, r := range h.Records {
		if r.Kind == "apply" && r.Shard == s {
			if t, ok := out[r.Index]; !ok || r.Nanos < t {
				out[r.Index] = r.Nanos
			}
		}
	}
	return out
}

func outcomeText(r status.HistoryRecord) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %d %v", r.Entry, r.Worker, r.Clock, r.Released)
	for _, p := range r.Pushes {
		fmt.Fprintf(&b, " [%s %d a%v d%v r%v g%d o%v %v]", p.Worker, p.Iter, p.Applied, p.Duplicate, p.Released, p.Gap, p.Others, p.Rejected != "")
	}
	return b.String()
}

type release struct {
	index uint64
	gap   int64
	nanos int64
}

// replayShard walks one shard's log: it rebuilds the clock table to check
// that clocks never go back, that no push is applied twice while its
// worker stays in the table, and the gap of every release; and it replays
// the gate from the log and compares each decision. mins gets the
// replayed gate's t_min after each index.
func replayShard(rep *Report, pol clock.Policy, s uint32, entries []status.HistoryRecord,
	releases map[pushKey][]release, applies map[pushKey][]int64, times map[uint64]int64, mins map[uint64]int64) {
	clocks := map[string]int64{}
	epoch := map[string]int{}
	applied := map[pushKey]int{} // epoch of the last application
	var gate *clock.Gate
	gap := func(w string) int64 {
		lo := int64(-1)
		for _, c := range clocks {
			if lo < 0 || c < lo {
				lo = c
			}
		}
		return clocks[w] - lo
	}
	released := func(w string, iter int64, x uint64) {
		g := gap(w)
		k := pushKey{s, w, iter}
		releases[k] = append(releases[k], release{index: x, gap: g, nanos: times[x]})
	}
	for _, e := range entries {
		switch e.Entry {
		case "init":
			if e.Err == "" {
				gate, _ = clock.NewGate(pol)
			}
		case "add-worker":
			if e.Err != "" {
				continue
			}
			// A resent add keeps the clock; an add that aligns the worker
			// with its other shards moves it forward; never back.
			if c, ok := clocks[e.Worker]; ok {
				if e.Clock < c {
					rep.ClockBack++
					rep.violate("shard %d index %d: add-worker %s moved its clock back %d → %d", s, e.Index, e.Worker, c, e.Clock)
				}
			} else {
				epoch[e.Worker]++
			}
			clocks[e.Worker] = e.Clock
			for _, r := range e.Released {
				released(r.Worker, r.Iter, e.Index)
			}
			if gate != nil {
				w := clock.WorkerID(e.Worker)
				var err error
				if _, present := gate.Clock(w); !present {
					_, err = gate.AddWorker(w)
				}
				c, rel, err2 := gate.AdvanceWorker(w, e.Clock)
				if err != nil || err2 != nil || c != e.Clock || !sameReleases(rel, e.Released) {
					rep.ReplayMismatch++
					rep.violate("shard %d index %d: replayed add-worker %s at %d releasing %v (%v, %v), log says %d releasing %v", s, e.Index, e.Worker, c, rel, err, err2, e.Clock, e.Released)
				}
			}
		case "remove-worker":
			if e.Err != "" {
				continue
			}
			delete(clocks, e.Worker)
			for _, r := range e.Released {
				released(r.Worker, r.Iter, e.Index)
			}
			if gate != nil {
				if _, present := gate.Clock(clock.WorkerID(e.Worker)); present {
					rel, _ := gate.RemoveWorker(clock.WorkerID(e.Worker))
					if !sameReleases(rel, e.Released) {
						rep.ReplayMismatch++
						rep.violate("shard %d index %d: replayed removal of %s released %v, log says %v", s, e.Index, e.Worker, rel, e.Released)
					}
				}
			}
		case "push":
			for _, p := range e.Pushes {
				w := string(p.Worker)
				k := pushKey{s, w, p.Iter}
				if p.Duplicate {
					rep.Duplicates++
				}
				if p.Applied {
					if c, ok := clocks[w]; ok && p.Iter < c {
						rep.ClockBack++
						rep.violate("shard %d index %d: %s iter %d applied below its clock %d", s, e.Index, w, p.Iter, c)
					}
					if ep, ok := applied[k]; ok && ep == epoch[w] {
						rep.AppliedTwice++
						rep.violate("shard %d index %d: %s iter %d applied again", s, e.Index, w, p.Iter)
					}
					applied[k] = epoch[w]
					applies[k] = append(applies[k], times[e.Index])
					clocks[w] = max(clocks[w], p.Iter+1)
				}
				if gate != nil && p.Rejected == "" {
					rep.Replayed++
					out, err := gate.Push(p.Worker, p.Iter, p.RecvNanos)
					var de *clock.DuplicatePushError
					dup := errors.As(err, &de)
					if (err == nil) != p.Applied || dup != p.Duplicate || out.Released != p.Released || out.Gap != p.Gap || !sameReleases(out.Others, p.Others) {
						rep.ReplayMismatch++
						rep.violate("shard %d index %d: replayed push %s/%d: released %v gap %d others %v err %v; log: applied %v released %v gap %d others %v",
							s, e.Index, w, p.Iter, out.Released, out.Gap, out.Others, err, p.Applied, p.Released, p.Gap, p.Others)
					}
				}
			}
			// Releases are judged after the whole entry, as the gate's
			// Outcome.Gap is.
			for _, p := range e.Pushes {
				if p.Applied && p.Released {
					released(string(p.Worker), p.Iter, e.Index)
				}
				for _, o := range p.Others {
					released(o.Worker, o.Iter, e.Index)
				}
			}
		}
		if gate != nil {
			mins[e.Index] = gate.Min()
		}
	}
}

// checkReads is the "reads within the bound" checker (docs/design.md,
// "The read guarantee"): each iteration a worker computes is recorded with
// the version of every shard's slice of its parameters (a read record).
// Under a bounded policy a slice of iteration t must hold every worker's
// updates of the iterations below t − s_U (its version's t_min ≥ t − s_U),
// with the job's s_U also under --pipeline (the gate releases one earlier
// so that the slice of the OK of t−2 meets it);
// and under any policy a version must not claim a t_min above the one the
// shard's log gives at its index. Slices read outside the gate (join's
// fetch, a clock moved by align) are counted apart, not judged.
func (h *History) checkReads(rep *Report, mins map[uint32]map[uint64]int64) {
	for _, r := range h.Records {
		if r.Kind != "read" {
			continue
		}
		for s, v := range r.Reads {
			if v.Unchecked {
				rep.ReadsUnchecked++
				continue
			}
			rep.Reads++
			lag := r.Iter - v.Min
			rep.MaxReadLag = max(rep.MaxReadLag, lag)
			if rep.SU >= 0 && lag > rep.SU {
				rep.ReadStale++
				rep.violate("%s computed iteration %d on shard %d's slice of index %d, t_min %d: iterations from %d missing, s_U %d",
					r.Worker, r.Iter, s, v.Index, v.Min, v.Min, rep.SU)
			}
			if m, ok := mins[uint32(s)][v.Index]; ok && v.Min > m {
				rep.ReadOverclaim++
				rep.violate("%s computed iteration %d on shard %d's slice said to be index %d, t_min %d; the log has t_min %d there",
					r.Worker, r.Iter, s, v.Index, v.Min, m)
			}
		}
	}
}

func sameReleases(a []clock.Release, b []status.HistoryRelease) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if string(a[i].Worker) != b[i].Worker || a[i].Iter != b[i].Iter {
			return false
		}
	}
	return true
}

// checkAcks matches every acknowledged push (with samples: the zero-sample
// fetch a worker makes on joining is answered by dedupe and names an
// iteration it may never have pushed) to its application and release.
func (h *History) checkAcks(rep *Report, releases map[pushKey][]release, applies map[pushKey][]int64) {
	lastOK := map[pushKey]int64{}
	firstInvoke := map[pushKey]int64{}
	for _, r := range h.Records {
		if r.Samples == 0 {
			continue
		}
		k := pushKey{r.Shard, r.Worker, r.Iter}
		switch r.Kind {
		case "invoke":
			if t, ok := firstInvoke[k]; !ok || t < lastOK[k] {
				firstInvoke[k] = r.Nanos
			}
		case "ok":
			rep.Acked++
			from := firstInvoke[k]
			lastOK[k] = r.Nanos
			found := false
			for _, t := range applies[k] {
				if t >= from && t <= r.Nanos {
					found = true
				}
			}
			if !found {
				rep.Lost++
				rep.violate("shard %d: %s iter %d acknowledged at %d, applied at %v", r.Shard, r.Worker, r.Iter, r.Nanos, applies[k])
				continue
			}
			var rel *release
			for i, x := range releases[k] {
				if x.nanos >= from && x.nanos <= r.Nanos {
					rel = &releases[k][i]
				}
			}
			switch {
			case rel == nil:
				rep.GapOver++
				rep.violate("shard %d: %s iter %d acknowledged but never released by the gate", r.Shard, r.Worker, r.Iter)
			case rep.GateSU >= 0 && rel.gap > rep.GateSU:
				rep.GapOver++
				rep.violate("shard %d: %s iter %d acknowledged with gap %d > the gate's s_U %d", r.Shard, r.Worker, r.Iter, rel.gap, rep.GateSU)
			}
			if rel != nil {
				rep.MaxGap = max(rep.MaxGap, rel.gap)
			}
		}
	}
}

func (h *History) checkLeaders(rep *Report) {
	type st struct {
		shard uint32
		term  uint64
	}
	leaders := map[st]map[string]bool{}
	for _, r := range h.Records {
		if r.Kind != "leader" {
			continue
		}
		k := st{r.Shard, r.Term}
		if leaders[k] == nil {
			leaders[k] = map[string]bool{}
		}
		leaders[k][r.Node] = true
	}
	rep.Terms = len(leaders)
	for k, nodes := range leaders {
		if len(nodes) > 1 {
			rep.TwoLeaders++
			rep.violate("shard %d term %d led by %v", k.shard, k.term, nodes)
		}
	}
}

// RefusedNonFinite counts the pushes of worker that a shard refused for a
// NaN or ±Inf gradient (its "fail" records).
func (h *History) RefusedNonFinite(worker string) int {
	n := 0
	for _, r := range h.Records {
		if r.Kind == "fail" && r.Worker == worker && strings.Contains(r.Err, "rejected: non-finite:") {
			n++
		}
	}
	return n
}

// checkFinite is the "parameters finite" checker: at every state-hash
// checkpoint each replica also counted its NaN or ±Inf parameters, and
// that count must be zero — a bad gradient must never reach a replica's
// state, whoever sent it.
func (h *History) checkFinite(rep *Report) {
	for _, r := range h.Records {
		if r.Kind != "apply" || r.Hash == "" {
			continue
		}
		rep.FiniteChecked++
		if r.NonFinite > 0 {
			rep.NonFinite++
			rep.violate("shard %d index %d on %s: %d parameters NaN or ±Inf", r.Shard, r.Index, r.Node, r.NonFinite)
		}
	}
}

func (h *History) checkHashes(rep *Report) {
	type at struct {
		shard uint32
		index uint64
	}
	hashes := map[at]map[string]string{}
	for _, r := range h.Records {
		if r.Kind != "apply" || r.Hash == "" {
			continue
		}
		k := at{r.Shard, r.Index}
		if hashes[k] == nil {
			hashes[k] = map[string]string{}
		}
		hashes[k][r.Node] = r.Hash
	}
	for k, byNode := range hashes {
		if len(byNode) < 2 {
			continue
		}
		rep.HashCompared++
		distinct := map[string]bool{}
		for _, v := range byNode {
			distinct[v] = true
		}
		if len(distinct) > 1 {
			rep.HashMismatch++
			rep.violate("shard %d index %d: replicas hold different states %v", k.shard, k.index, byNode)
		}
	}
}

// agreementPeriod is shard.DefaultCheckEvery: a diverged replica must be
// named at a check of an index at most two periods past the first
// checkpoint that shows it in a minority.
const agreementPeriod = 256

// checkAgreement is the agreement checker: every replica whose state
// hash differs from a strict majority's (of at least three replicas) at
// a checkpoint must have said it diverged (a "diverged" record of that
// shard) at a check at most two periods later (judged once the shard's
// log is that far); and a replica that said
// its digest differed must have been in a minority at some checkpoint
// (a damaged log, named without applying it, is not judged).
func (h *History) checkAgreement(rep *Report) {
	type key struct {
		shard uint32
		node  string
	}
	type at struct {
		shard uint32
		index uint64
	}
	hashes := map[at]map[string]string{}
	last := map[uint32]uint64{} // the highest index applied per shard
	for _, r := range h.Records {
		if r.Kind == "apply" {
			last[r.Shard] = max(last[r.Shard], r.Index)
		}
		if r.Kind == "apply" && r.Hash != "" {
			k := at{r.Shard, r.Index}
			if hashes[k] == nil {
				hashes[k] = map[string]string{}
			}
			hashes[k][r.Node] = r.Hash
		}
	}
	minority := map[key]uint64{} // the first checkpoint showing it
	for k, byNode := range hashes {
		if len(byNode) < 3 {
			continue
		}
		count := map[string]int{}
		for _, v := range byNode {
			count[v]++
		}
		for node, v := range byNode {
			for w, n := range count {
				if w != v && 2*n > len(byNode) {
					kk := key{k.shard, node}
					if first, ok := minority[kk]; !ok || k.index < first {
						minority[kk] = k.index
					}
				}
			}
		}
	}
	named := map[key]status.HistoryRecord{}
	for _, r := range h.Records {
		if r.Kind == "diverged" {
			if _, ok := named[key{r.Shard, r.Node}]; !ok {
				named[key{r.Shard, r.Node}] = r
			}
		}
	}
	rep.Diverging, rep.Named = len(minority), len(named)
	for k, first := range minority {
		r, ok := named[k]
		if !ok && first+2*agreementPeriod > last[k.shard] {
			continue // not judged yet: the run ended within two periods
		}
		if !ok || r.Index > first+2*agreementPeriod {
			rep.Unnamed++
			rep.violate("shard %d: %s held another state than the majority at index %d and did not say it diverged within two check periods (%v)", k.shard, k.node, first, ok)
		}
	}
	for k, r := range named {
		if _, ok := minority[k]; !ok && r.Entry == "digest" {
			rep.FalseAlarm++
			rep.violate("shard %d: %s said it diverged at index %d (%s) but never held another state than the majority", k.shard, k.node, r.Index, r.Err)
		}
	}
}
