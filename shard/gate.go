package shard

import (
	"errors"
	"fmt"

	"dsspmesh/clock"
	"dsspmesh/internal/faults"
	"dsspmesh/shardapi"
)

// gateState is the shard's clock.Gate (docs/design.md, "The gate rules"):
// the workers' clocks — the dedupe table, a worker's clock being its last
// applied iteration + 1 —, the held pushes and the controller. Its section
// is the gate's own encoding under "gate". It is nil before Init.
type gateState struct{ g *clock.Gate }

func newGate(spec shardapi.Spec) (gateState, error) {
	pol, _ := spec.GatePolicy() // Validate checked it
	g, err := clock.NewGate(pol)
	return gateState{g}, err
}

// push gives p to the gate: its outcome, or why it is not applied (a
// *clock.DuplicatePushError for a duplicate).
func (s gateState) push(p Push) (clock.Outcome, error) {
	out, err := s.g.Push(p.Worker, p.Iter, p.RecvNanos)
	if err == nil && faults.On(faults.SkipStaleness) {
		out.Released = true // broken build only: the gate's hold ignored
	}
	return out, err
}

// takes reports whether the gate would apply w's push iter now: w known,
// at its clock iter, not held.
func (s gateState) takes(w clock.WorkerID, iter int64) bool {
	c, ok := s.g.Clock(w)
	return ok && c == iter && !s.g.IsWaiting(w)
}

// evaluator is the worker the evaluation lease names (docs/design.md,
// "The evaluator"): the lowest id among the gate's workers that have had a
// push applied since they joined it — a member that proved it trains, not
// one that says so. It changes only when such a worker joins or leaves
// (removed, suspended, revoked); "" while no worker has pushed. Derived
// from the gate's own state, it adds nothing to a snapshot: every replica
// names the same at the same index.
func (s gateState) evaluator() clock.WorkerID {
	if s.g == nil {
		return ""
	}
	for _, w := range s.g.Workers() { // sorted by id
		if info, ok := s.g.Worker(w); ok && info.Stats.Pushes > 0 {
			return w
		}
	}
	return ""
}

// applied reports whether w's push iter was applied before (a duplicate).
func (s gateState) applied(w clock.WorkerID, iter int64) bool {
	c, ok := s.g.Clock(w)
	return ok && iter < c
}

func gateReason(err error) shardapi.Reason {
	var fut *clock.FuturePushError
	switch {
	case errors.As(err, &fut):
		return shardapi.ReasonFuture
	case errors.Is(err, clock.ErrUnknownWorker):
		return shardapi.ReasonUnknownWorker
	case errors.Is(err, clock.ErrWorkerWaiting):
		return shardapi.ReasonWaiting
	}
	return shardapi.ReasonBadRequest
}

// add places w at max(t_min, from): a new worker joins at the slowest's
// clock unless its other shards already have it further; a present worker
// below from is advanced there (clock.Gate.AdvanceWorker), so a worker's
// clock is the same on every shard. It never moves a clock back.
func (s gateState) add(w clock.WorkerID, from int64) (int64, []clock.Release, error) {
	if _, ok := s.g.Clock(w); !ok {
		if _, err := s.g.AddWorker(w); err != nil {
			return 0, nil, err
		}
	}
	return s.g.AdvanceWorker(w, from)
}

// has reports whether w is in the gate.
func (s gateState) has(w clock.WorkerID) bool {
	_, ok := s.g.Clock(w)
	return ok
}

// suspendable reports whether w is still at clk and the gate could
// suspend it (suspect.go).
func (s gateState) suspendable(w clock.WorkerID, clk int64) bool {
	c, ok := s.g.Clock(w)
	return ok && c == clk && s.g.Suspectable(w)
}

// replyState is what the leader's replier needs to answer a push (w, iter).
type replyState uint8

const (
	replyOK      replyState = iota + 1 // applied and not held: send OK
	replyHeld                          // applied and held by the gate
	replyPending                       // not applied yet (iter ≥ clock)
	replyUnknown                       // worker not in the table
)

// reply decides the reply to (w, iter) from the gate.
func (s gateState) reply(w clock.WorkerID, iter int64) replyState {
	c, ok := s.g.Clock(w)
	switch {
	case !ok:
		return replyUnknown
	case c <= iter:
		return replyPending
	case c == iter+1 && s.g.IsWaiting(w) && !faults.On(faults.SkipStaleness):
		return replyHeld
	}
	return replyOK
}

// summable marks, for each push of ps, whether it may join a batch's
// summed group as far as the gate says (proposer.go): the gate takes it,
// one push per worker.
func (s gateState) summable(ps []*Push, ok []bool) {
	seen := make(map[clock.WorkerID]bool, len(ps))
	for i, p := range ps {
		ok[i] = ok[i] && s.takes(p.Worker, p.Iter) && !seen[p.Worker]
		if ok[i] {
			seen[p.Worker] = true
		}
	}
}

// suspectCandidate is a worker the gate could suspend.
type suspectCandidate struct {
	w      clock.WorkerID
	clock  int64
	times  clock.Timestamps
	nTimes int
}

// suspectable lists the workers the gate could suspend now.
func (s gateState) suspectable() []suspectCandidate {
	if s.g.Len() < 2 {
		return nil
	}
	// Cheap filters first (this runs every Check on every leader): no
	// held push, nobody to release; only workers at t_min qualify.
	if len(s.g.Waiting()) == 0 {
		return nil
	}
	var out []suspectCandidate
	for _, w := range s.g.Workers() {
		info, _ := s.g.Worker(w)
		if info.Clock != s.g.Min() || info.Waiting || !s.g.Suspectable(w) {
			continue
		}
		out = append(out, suspectCandidate{w: w, clock: info.Clock, times: info.Times, nTimes: info.NTimes})
	}
	return out
}

// report fills the gate's part of a status.
func (s gateState) report(st *shardapi.Status) {
	if s.g == nil {
		return
	}
	st.Min, st.Max, st.Gate, st.Evaluator = s.g.Min(), s.g.Max(), s.g.Totals(), string(s.evaluator())
	for _, w := range s.g.Workers() {
		info, _ := s.g.Worker(w)
		st.Workers = append(st.Workers, info)
	}
}

func (s *gateState) save(h *header) error {
	var b []byte
	if s.g != nil {
		var err error
		if b, err = s.g.MarshalBinary(); err != nil {
			return fmt.Errorf("encode gate: %w", err)
		}
	}
	h.put("gate", b)
	return nil
}

func (s *gateState) load(h *header, j job) error {
	var b []byte
	if _, err := h.get("gate", &b); err != nil {
		return err
	}
	if !j.initialized {
		if len(b) != 0 {
			return errors.New("state in an uninitialised snapshot")
		}
		return nil
	}
	s.g = &clock.Gate{}
	if err := s.g.UnmarshalBinary(b); err != nil {
		return fmt.Errorf("gate: %v", err)
	}
	return nil
}
