package shardapi

// Version names the state of a shard that a parameter slice holds: the
// raft index of the last entry the replica had applied when it read the
// slice, and the shard's t_min then (the lowest clock of its clock table).
// Such a slice holds every update of every worker for the iterations below
// Min (a worker's clock c means its pushes below c were applied; t_min never
// decreases, so a worker added later starts at or above Min) and whatever
// else the state had at Index.
//
// On the wire, an OK reply to a push carries it in [Reply].Index,
// [Reply].Clock and [Reply].Samples, as an OpRead reply does
// (docs/design.md, "The read guarantee").
type Version struct {
	Index uint64
	Min   int64
	// Samples is the samples applied mesh-wide that the state had at
	// Index (the schedule's input): a worker stepping its own optimizer
	// under the combine rule mean reads its learning rate from it.
	Samples int64 `json:",omitempty"`
}

// Covers reports whether a slice of version v is fresh enough for the
// iteration iter under a bound of s iterations: every worker's updates of
// the iterations below iter−s are in it (Min ≥ iter−s). s < 0 means no
// bound: every version is.
func (v Version) Covers(iter, s int64) bool {
	return s < 0 || v.Min >= iter-s
}
