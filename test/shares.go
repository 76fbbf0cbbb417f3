package test

import (
	"cmp"
	"fmt"
	"slices"

	"dsspmesh/node/status"
)

// checkShares is the balance layer's "shares" checker (docs/design.md#balance):
// under --balance every iteration t has one global batch, a stretch of
// Global positions of the job's data order, which the allocation in force
// for t cuts into the workers' shares; each read record names the share the
// worker computed t on. Over the shares of acknowledged pushes (a push
// acknowledged by any shard: its samples reached the model) it checks:
//
//   - tiling: no two shares overlap anywhere in the data order (no sample is
//     read twice in an epoch), and the shares of one iteration come from one
//     allocation (version and global batch alike);
//   - re-allocation: an iteration whose shares fall short of its global
//     batch must be explained by a worker that has no share of it and was
//     at a clock within s_U + lead + 1 iterations below it (its last push
//     acknowledged, or applied on shard 0, or its add-worker there): a
//     member of the gate holds everyone within s_U of its clock, and its
//     departure puts a new allocation in force by t_max + lead, so a dead
//     or suspended worker's share stays unread for at most that many
//     iterations. lead is 1, or 2 under --pipeline. Under an unbounded
//     policy only tiling is judged.
//
// A share is taken from the worker's last read record of the iteration
// before its first acknowledgement of it (a refused push is computed again).
// Under local rounds a probe round (an assignment without a prediction)
// reads only the first samples of its share: the share is still the
// worker's, and the rest of it goes unread that round.
func (h *History) checkShares(rep *Report, pipeline bool) {
	type wi struct {
		worker string
		iter   int64
	}
	reads := map[wi]*status.HistoryShare{}
	acked := map[wi]*status.HistoryShare{}
	marks := map[string][]int64{} // per worker: clocks it was seen at
	mark := func(w string, c int64) { marks[w] = append(marks[w], c) }
	for _, r := range h.Records {
		k := wi{r.Worker, r.Iter}
		switch {
		case r.Kind == "read":
			reads[k] = r.Share
		case r.Kind == "ok" && r.Samples > 0:
			if _, seen := acked[k]; !seen {
				acked[k] = reads[k]
				mark(r.Worker, r.Iter)
			}
		case r.Kind == "apply" && r.Shard == 0 && r.Entry == "add-worker" && r.Err == "":
			mark(r.Worker, r.Clock)
		case r.Kind == "apply" && r.Shard == 0 && r.Entry == "push":
			// The gate's clock moves with an applied push whether or not
			// its OK reached the worker (killed while it was on its way).
			for _, p := range r.Pushes {
				if p.Applied {
					mark(string(p.Worker), p.Iter)
				}
			}
		}
	}
	type share struct {
		worker string
		iter   int64
		*status.HistoryShare
	}
	var all []share
	byIter := map[int64][]share{}
	for k, s := range acked {
		if s == nil {
			continue
		}
		sh := share{k.worker, k.iter, s}
		all = append(all, sh)
		byIter[k.iter] = append(byIter[k.iter], sh)
	}
	if len(all) == 0 {
		return
	}
	slices.SortFunc(all, func(a, b share) int { return cmp.Compare(a.Pos, b.Pos) })
	for i := 1; i < len(all); i++ {
		if a, b := all[i-1], all[i]; b.Pos < a.Pos+a.Batch {
			rep.ShareTiling++
			rep.violate("%s iter %d read positions [%d, %d) of the data order, %s iter %d [%d, %d): they overlap",
				a.worker, a.iter, a.Pos, a.Pos+a.Batch, b.worker, b.iter, b.Pos, b.Pos+b.Batch)
		}
	}
	lead := int64(1)
	if pipeline {
		lead = 2
	}
	window := rep.SU + lead + 1
	for w := range marks {
		slices.Sort(marks[w])
		marks[w] = slices.Compact(marks[w]) // every replica of shard 0 applied the same pushes
	}
	iters := make([]int64, 0, len(byIter))
	for t := range byIter {
		iters = append(iters, t)
	}
	slices.Sort(iters)
	run, prev := int64(0), int64(-2)
	for _, t := range iters {
		shares := byIter[t]
		slices.SortFunc(shares, func(a, b share) int { return cmp.Compare(a.Pos, b.Pos) })
		rep.ShareRounds++
		sum := int64(0)
		for _, s := range shares {
			sum += s.Batch
		}
		if i := slices.IndexFunc(shares, func(s share) bool {
			return s.Version != shares[0].Version || s.Global != shares[0].Global
		}); i > 0 {
			s := shares[i]
			rep.ShareTiling++
			rep.violate("iteration %d read under two allocations: %s v%d of %d, %s v%d of %d",
				t, shares[0].worker, shares[0].Version, shares[0].Global, s.worker, s.Version, s.Global)
		}
		if sum >= shares[0].Global {
			prev = -2
			continue
		}
		rep.ShareShort++
		if t == prev+1 {
			run++
			rep.ShortRuns[len(rep.ShortRuns)-1].To = t
		} else {
			run = 1
			rep.ShortRuns = append(rep.ShortRuns, ShortRun{From: t, To: t, Read: sum, Global: shares[0].Global})
		}
		prev = t
		rep.MaxShortRun = max(rep.MaxShortRun, run)
		if rep.SU < 0 {
			continue
		}
		explained := false
		for w, ms := range marks {
			if slices.ContainsFunc(shares, func(s share) bool { return s.worker == w }) {
				continue
			}
			// the worker's highest clock at or below t
			i, _ := slices.BinarySearch(ms, t+1)
			if i > 0 && t-ms[i-1] <= window {
				explained = true
				break
			}
		}
		if !explained {
			rep.ShareUnread++
			rep.violate("iteration %d: shares of %d of its %d samples acknowledged, and no worker without a share was within %d iterations of it",
				t, sum, shares[0].Global, window)
		}
	}
}

// ShortRun is a run of consecutive iterations whose global batch was
// partly unread: the shares' departure window (explained or not).
type ShortRun struct {
	From, To int64
	// Read of Global samples at From.
	Read, Global int64
}

func (r ShortRun) String() string {
	return fmt.Sprintf("iterations %d–%d (%d), %d of %d samples read at the first", r.From, r.To, r.To-r.From+1, r.Read, r.Global)
}
