package node

// Pulling only what the staleness bound requires (docs/design.md, "The read
// guarantee"): a worker keeps its copy of a shard's slice across iterations
// while the copy holds every worker's updates below iteration t − s_L for
// the iteration t it serves, and its push then asks for no parameters
// (shardapi.Push.Keep). Under bsp and asp (s_L = 0) that never happens
// — a copy fetched at the OK of t−1 has t_min ≤ t−1 — so every OK carries
// the slice as before; under ssp:s and dssp:s_L:r_max a slice is fetched
// about once in s_L+1 iterations when the workers keep pace.

// pullSlack is how many iterations a kept slice may miss: the policy's s_L
// (s for ssp, 0 for bsp and asp), never more than s_U.
func pullSlack(spec JobSpec) int64 {
	p, err := spec.Policy()
	if err != nil {
		return 0
	}
	return p.SL
}

// keepSlice reports whether the worker's copy of shard s's slice is fresh
// enough for every iteration the reply to its push of w.iters[s] would
// serve, up to w.iters[s]+w.ahead (the next one; under --pipeline also
// the one after, computed while the next push is in flight): a slice it
// fetched through the gate (not join's fetch, not one read before align
// moved the clock) whose t_min is at least w.iters[s]+w.ahead−slack. The
// push goroutine for s calls it; it reads only s's state, which the loop
// does not write while the push is in flight.
func (w *worker) keepSlice(s int) bool {
	r := w.reads[s]
	return w.slack > 0 && r.Index > 0 && !r.Unchecked && r.Covers(w.iters[s]+w.ahead, w.slack)
}

// pulled counts an acknowledged push with (keep false) or without its slice.
func (w *worker) pulled(keep bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if keep {
		w.stats.SlicesKept++
	} else {
		w.stats.SlicesPulled++
	}
}
