package shard

import (
	"context"
	"sync"
	"time"

	"dsspmesh/clock"
	"dsspmesh/mesh"
)

// Suspicion: the leader stops a dead worker from holding the living.
//
// Gossip declares a killed node dead after seconds (memberlist's LAN
// profile: 5–6 s); until then every other worker sits at s_U behind it. The
// shard leader has evidence sooner. Every SuspectPolicy.Check it looks at
// the workers its gate could suspend (clock.Gate.Suspectable: at t_min,
// its own push not held, some other worker's push held) and suspects one
// that is both
//
//   - overdue: no push for After of its own predicted push intervals
//     (clock.Overdue, the interval A[0] − A[1] the DSSP controller predicts
//     with), and never less than Floor, counted from its last push or from
//     when this replica took the lead, whichever is later (a receipt time
//     written by another leader is not trusted to be on this clock); and
//   - disconnected: with a transport that reports silence
//     (mesh.SilenceReporter, QUIC), no connection to that node or nothing
//     at all received from it for Silence (1.5 s: two keep-alive periods;
//     a kill -9 leaves the connection open until its idle timeout, 3 s,
//     but its keep-alives go unanswered at once). A live worker blocked
//     on another shard, with no stream here, still answers keep-alives
//     and is not suspected. Without one (in-memory transport): no worker
//     stream from that node is open at this replica.
//
// It then proposes a suspend entry (entrySuspendWorker) naming the worker
// and the clock it saw. Every replica applies it the same way: if the
// worker is still at that clock and still Suspectable it is removed from
// the gate — exactly a RemoveWorker (under the balance layer its share of
// the global batch goes to the others too), reported as Applied{Kind:
// "remove-worker", Suspected: true}, so the workers it held are released
// — otherwise (it pushed meanwhile) the entry changes nothing (Kind
// "suspect"). One proposal per worker at a time.
//
// Re-admission is the path a worker wrongly declared dead already takes:
// its next request is refused as unknown-worker and its client adds it
// again with AddWorker(from = its own next iteration), placing it at
// max(t_min, from). Since it was suspended at t_min with no push held,
// t_min has not fallen below its clock since, so it comes back at or past
// the clock it had: nothing of it is applied twice and its clock never
// goes back (clock.TestSuspendedWorkerReadmitted,
// TestSuspectedWorkerReadmitted here). A false suspicion costs the
// worker the wait of one AddWorker; its gradient for the iterations it
// skips, if t_min moved past it, are the ones AdvanceWorker counts empty.

// suspector is the leader's periodic check; it runs for the replica's
// life and does nothing while the replica follows.
type suspector struct {
	m  *member
	in *intake // the worker streams open here (disconnected)

	mu sync.Mutex
	// leadSince is when this replica took the lead (zero while it
	// follows); suspecting are the workers whose suspension is proposed.
	leadSince  time.Time
	suspecting map[clock.WorkerID]bool
}

func (s *suspector) run() {
	pol := s.m.cfg.Suspect.orDefault()
	if pol.Off {
		return
	}
	tick := time.NewTicker(pol.Check)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-s.m.ctx.Done():
			return
		}
		for _, c := range s.suspects(s.m.deps.Clock.Now()) {
			s.m.wg.Add(1)
			go func() {
				defer s.m.wg.Done()
				s.suspend(c)
			}()
		}
	}
}

// suspects returns the workers to suspend at now (see the file comment)
// and marks them in flight. It tracks when this replica took the lead.
func (s *suspector) suspects(now time.Time) []suspectCandidate {
	pol := s.m.cfg.Suspect.orDefault()
	if !s.m.IsLeader() {
		s.mu.Lock()
		s.leadSince = time.Time{}
		s.mu.Unlock()
		return nil
	}
	var cands []suspectCandidate
	s.m.fsm.read(func(st *state) {
		if st.job.initialized {
			cands = st.gate.suspectable()
		}
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leadSince.IsZero() {
		s.leadSince = now
	}
	var out []suspectCandidate
	for _, c := range cands {
		last := max(s.leadSince.UnixNano(), c.times.Latest)
		if !clock.Overdue(c.times, c.nTimes, last, now.UnixNano(), pol.After, pol.Floor.Nanoseconds()) {
			continue
		}
		if s.suspecting[c.w] || !s.disconnected(mesh.NodeID(c.w), pol.Silence) {
			continue
		}
		if s.suspecting == nil {
			s.suspecting = map[clock.WorkerID]bool{}
		}
		s.suspecting[c.w] = true
		out = append(out, c)
	}
	return out
}

// disconnected is the suspicion's evidence that id's node is gone. A
// transport that reports silence (QUIC) decides: no connection to the
// node, or nothing heard from it for d — a live node answers keep-alives
// even while its worker is blocked on another shard and has no stream
// here (a new leader's case). Otherwise (in-memory transport): no worker
// stream from id is open here.
func (s *suspector) disconnected(id mesh.NodeID, d time.Duration) bool {
	if sr, ok := s.m.deps.Transport.(mesh.SilenceReporter); ok {
		quiet, connected := sr.PeerSilence(id)
		return !connected || quiet >= d
	}
	return !s.in.connected(id)
}

// suspend proposes the suspend entry for c and logs the outcome.
func (s *suspector) suspend(c suspectCandidate) {
	defer func() {
		s.mu.Lock()
		delete(s.suspecting, c.w)
		s.mu.Unlock()
	}()
	b, err := encodeSuspend(c.w, c.clock)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(s.m.ctx, s.m.cfg.ApplyTimeout)
	defer cancel()
	a, err := s.m.propose(ctx, b)
	switch {
	case err != nil:
		s.m.log.Debug("suspend worker", "worker", c.w, "err", err)
	case a.Suspected:
		s.m.log.Info("suspended a silent, disconnected worker", "worker", c.w, "clock", c.clock, "released", len(a.Released))
	}
}
