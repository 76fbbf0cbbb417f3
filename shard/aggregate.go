package shard

import (
	"dsspmesh/internal/faults"
	"dsspmesh/shardapi"
)

// Replicate after aggregating: the pushes of one batch that the applied
// state says the gate will take — a known worker at its clock, not held,
// not already in an entry still in flight, one push per worker — travel as
// one summed gradient (entry.go's group) with each push's metadata, so a
// follower receives and logs one gradient for them. The FSM applies the
// group all or nothing (applyGroup, pushapply.go): when a push the gate would not
// take after all (its worker removed meanwhile, ...) is in it, nothing of
// the group is applied, never half of a sum, and the leader proposes the
// group's pushes again itself (ErrRegroup, service.regroup) on the state
// as it is then; their workers only wait longer. The other pushes of the
// batch follow with their own gradients.
//
// Why the leader sums rather than the FSM (which sums an entry's gradients
// into one optimizer step anyway): a sum made in the FSM would leave every
// gradient in the entry, so every follower would receive, log and fsync k
// gradients for k pushes; summed by the leader they receive one. The price
// is the speculation: the leader groups on its applied state, which an
// entry still in flight may change, hence the all-or-nothing apply and the
// regroup.

// group orders batch as it will sit in the entry — the summed group first
// — and returns the entry's data. The pushes it puts in the group are
// marked in flight until the completer clears them.
func (s *service) group(batch []*Push) ([]*Push, []byte, error) {
	spec := s.r.fsm.pushLimits()
	n, prec := spec.Len, spec.Precision
	var base int64 // the weight's base when the shard weighs pushes (Spec.Weighted)
	if spec.Weighted() {
		base = spec.BalanceBase
	}
	ok := make([]bool, len(batch))
	if s.r.cfg.SumBatches && len(batch) >= 2 && n > 0 && !faults.On(faults.SkipDedupe) && !faults.On(faults.SkipNonFinite) {
		s.mu.Lock()
		for i, p := range batch {
			ok[i] = s.inflight[p.PushID] == 0 && len(p.Grad) == prec.Bytes(n)
		}
		s.mu.Unlock()
		s.r.fsm.read(func(st *state) {
			if st.job.initialized {
				st.gate.summable(batch, ok)
			}
		})
	}
	var group, rest []*Push
	for i, p := range batch {
		if ok[i] {
			group = append(group, p)
		} else {
			rest = append(rest, p)
		}
	}
	if len(group) < 2 {
		group, rest = nil, batch
	}
	var sum []byte
	if len(group) > 0 {
		sum = groupSum(group, n, prec, base)
	}
	gp, rp := make([]Push, len(group)), make([]Push, len(rest))
	for i, p := range group {
		gp[i] = *p
	}
	for i, p := range rest {
		rp[i] = *p
	}
	data, err := encodeGroup(gp, sum, rp)
	if err != nil {
		return batch, nil, err
	}
	s.mu.Lock()
	for _, p := range batch {
		s.inflight[p.PushID]++
	}
	s.mu.Unlock()
	s.cnt.summed.Add(uint64(len(group)))
	return append(group, rest...), data, nil
}

// groupSum is the sum of the group's gradients, pushed in prec and encoded
// in prec.Sums(), each weighted as params.weigh weights a push's (samples /
// base, unless base is 0 or the push has exactly base samples), added in
// the group's order in float32 as params.check adds an entry's
// gradients.
func groupSum(group []*Push, n int, prec shardapi.Precision, base int64) []byte {
	acc, v := scratch.get(n), scratch.get(n)
	defer scratch.put(acc)
	defer scratch.put(v)
	clear(acc)
	for _, p := range group {
		prec.Decode(v, p.Grad) // the length was checked by group
		if base > 0 && p.Samples != base {
			w := float32(float64(p.Samples) / float64(base))
			for j, g := range v {
				v[j] = float32(g * w)
			}
		}
		for j, x := range v {
			acc[j] += x
		}
	}
	return prec.Sums().Append(nil, acc)
}

// landed clears the pushes of a completed proposal from the in-flight set.
func (s *service) landed(batch []*Push) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range batch {
		if s.inflight[p.PushID]--; s.inflight[p.PushID] <= 0 {
			delete(s.inflight, p.PushID)
		}
		s.trackLocked(p, -1)
	}
}

// regroup proposes again a push whose summed group the FSM did not apply
// (ErrRegroup): nothing of the group changed, and the applied state now
// answers it (a duplicate, a worker removed) or it goes into a later
// entry, grouped by the state as it is then. The worker waits on the same
// stream, with Pending frames, as for any push not yet decided. The queue
// is fed from another goroutine: the completer must not block on the
// proposer, which may be waiting for a slot the completer frees.
func (s *service) regroup(p *Push) {
	s.cnt.regrouped.Add(1)
	if !s.settle(p, onArrival) {
		return
	}
	s.track(p, 1)
	s.r.wg.Add(1)
	go func() {
		defer s.r.wg.Done()
		select {
		case s.queue <- p:
		case <-s.r.ctx.Done():
		}
	}()
}
