package worker

// Pulling only what the staleness bound requires (docs/design.md, "The read
// guarantee"): a worker keeps its copy of a shard's slice across iterations
// while the copy holds every worker's updates below iteration t − s_L for
// the iteration t it serves, and its push then asks for no parameters
// (shardapi.Push.Keep; Step.Keep decides). Under bsp and asp (s_L = 0) that never happens
// — a copy fetched at the OK of t−1 has t_min ≤ t−1 — so every OK carries
// the slice as before; under ssp:s and dssp:s_L:r_max a slice is fetched
// about once in s_L+1 iterations when the workers keep pace.

// pulled counts an acknowledged push with (keep false) or without its slice.
func (w *Worker) pulled(keep bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if keep {
		w.stats.SlicesKept++
	} else {
		w.stats.SlicesPulled++
	}
}
