package shard

import (
	"context"
	"sync"
	"time"

	"dsspmesh/clock"
	"dsspmesh/mesh"
)

// Suspicion: the leader stops a dead worker from holding the living
// (docs/design.md, "Suspicion"): every SuspectPolicy.Check it proposes a
// suspend entry for a worker the gate could suspend that is overdue and
// disconnected; every replica applies it as a RemoveWorker only if the
// worker is still at the clock the leader saw (applySuspend). A worker
// suspended by mistake comes back through AddWorker at or past its clock.

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
