package clock

// Suspicion: a dead worker must not hold the living at s_U until gossip
// declares it dead. The shard leader suspects a worker from its own
// evidence (shard/suspect.go) and proposes a suspension through Raft; the
// gate itself only answers the two deterministic questions below. A
// suspension is a RemoveWorker; re-admission is the ordinary AddWorker at
// max(t_min, from) followed by AdvanceWorker. Because only a worker at
// t_min whose push is not held may be suspended, t_min after the removal is
// at least the suspended clock, so the re-added worker lands at or past
// the clock it had: no iteration of it is applied twice and no clock goes
// back (TestSuspendedWorkerReadmitted).

// Suspectable reports whether w may be suspended now: it is present, at
// t_min, its own push is not held, and some other worker's push is held —
// it is holding the living back. Deterministic: the shard FSM evaluates it
// again when the suspension entry applies, on every replica alike.
func (g *Gate) Suspectable(w WorkerID) bool {
	info, ok := g.Worker(w)
	if !ok || info.Waiting || info.Clock != g.Min() {
		return false
	}
	for _, r := range g.Waiting() {
		if r.Worker != w {
			return true
		}
	}
	return false
}

// Overdue reports whether a worker is overdue at now (ns): its last push
// was seen at last and it has not pushed since for k of its own predicted
// push intervals (t's A[0] − A[1], the interval the DSSP controller
// predicts with; n timestamps known), and never for less than floor. A
// worker with fewer than two timestamps has no prediction: floor alone.
func Overdue(t Timestamps, n int, last, now, k, floor int64) bool {
	wait := floor
	if n >= 2 {
		wait = max(floor, satMul(max(k, 0), t.interval()))
	}
	return satSub(now, last) > wait
}
