package shard

import (
	"errors"
	"fmt"

	"dsspmesh/clock"
	"dsspmesh/internal/faults"
	"dsspmesh/shardapi"
)

// applyPushEntry is the one place that takes a push through the
// sub-machines, in the order of docs/design.md, "Sub-machines": the job,
// the identities, the parameters, the gate, then the parameters' sum and
// the followers. A summed group goes first (applyGroup); one step an entry.
func applyPushEntry(st *state, e entry, out *shardapi.Applied) {
	ps := e.Pushes
	res := make([]shardapi.PushResult, len(ps))
	out.Kind, out.Pushes = "push", res
	p := &st.params
	if st.job.initialized {
		defer p.release()
	}
	accepted, workers := 0, 0
	if st.gate.g != nil {
		workers = st.gate.g.Len()
	}
	var samples, arrivals int64    // arrivals: accepted pushes with samples (the outer rule's count)
	lr := p.rate(st.tally.samples) // one step per entry, at the rate before it; named in a refusal
	if e.Summed > 0 {
		if n, s, a := applyGroup(st, ps[:e.Summed], e.sum, res[:e.Summed], lr); n > 0 {
			accepted, samples, arrivals = n, s, a
		}
	}
	for i := e.Summed; i < len(ps); i++ {
		q := ps[i]
		r := &res[i]
		r.PushMeta, r.RecvNanos = q.PushMeta, q.RecvNanos
		if reason, detail := checkAlone(st, q); reason != 0 {
			r.Err = refuse(st, q, reason, detail)
			continue
		}
		p.weigh(q.Samples)
		// The step with this gradient added must leave every parameter
		// finite. The check runs before the gate sees the push, so a
		// refused push changes nothing; it is pure arithmetic on the
		// replicated state, so every replica decides alike.
		arrival := int64(0)
		if q.Samples > 0 {
			arrival = 1
		}
		if j := p.check(accepted == 0, arrivals+arrival, workers, lr); j >= 0 && !faults.On(faults.SkipNonFinite) {
			r.Err = refuse(st, q, shardapi.ReasonNonFiniteStep, fmt.Sprintf("parameter %d would become non-finite or reach ±2^64 (learning rate %g)", j, lr))
			continue
		}
		outcome, err := st.gate.push(q)
		var dup *clock.DuplicatePushError
		if errors.As(err, &dup) && faults.On(faults.SkipDedupe) {
			err, outcome.Released = nil, true // broken build only: applied again
		}
		if err != nil {
			if errors.As(err, &dup) {
				r.Duplicate = true
				st.tally.duplicate()
				continue
			}
			r.Err = refuse(st, q, gateReason(err), err.Error())
			continue
		}
		r.Applied, r.Outcome = true, outcome
		switch {
		case faults.On(faults.Diverge) && faults.Coin(16):
			// broken build only: this replica drops the gradient
			if accepted == 0 {
				p.take(true)
				clear(p.sum)
			}
		default:
			p.take(accepted == 0) // the checked sum becomes the sum
		}
		accepted++
		arrivals += arrival
		samples = satAdd(samples, q.Samples)
		for _, f := range st.followers() {
			f.observe(q, st.gate.g)
		}
	}
	if st.job.initialized {
		for _, f := range st.followers() {
			f.tick(st.gate.g)
		}
	}
	if accepted > 0 {
		p.step(lr, arrivals, workers)
		st.tally.applied(accepted, samples)
	}
}

// checkAlone checks a push of its own against the job and the identities
// and decodes its gradient into the parameters' buffer.
func checkAlone(st *state, q Push) (shardapi.Reason, string) {
	if !st.job.initialized {
		return shardapi.ReasonNotInitialized, "no Init entry applied"
	}
	spec := st.job.spec
	if reason, detail := checkPush(q.PushMeta, len(q.Grad), spec.Len, spec); reason != 0 {
		return reason, detail
	}
	if st.ids.isRevoked(q.Worker) {
		return shardapi.ReasonNotPeer, fmt.Sprintf("node %q is revoked", q.Worker)
	}
	return st.params.decode(q.Grad, q.Samples, !faults.On(faults.SkipNonFinite))
}

// refuse counts a refusal of q and returns it.
func refuse(st *state, q Push, reason shardapi.Reason, detail string) error {
	st.tally.refuse(reason)
	return &shardapi.RejectError{Shard: st.shard, Worker: q.Worker, Iter: q.Iter, Reason: reason, Detail: detail}
}

// ErrRegroup is the outcome of a push of a summed group the FSM did not
// apply because another push of the group could not be (a duplicate, a
// removed worker, ...): nothing of the group changed, and the leader
// proposes the push again (proposer.regroup); its worker never sees it.
var ErrRegroup = errors.New("shard: not applied: a push summed with it could not be; proposed again")

// applyGroup applies a summed group (their gradients' sum in sum) all or
// nothing: only if every push passes checkPush and would be accepted by
// the gate (known worker, its clock at the push's iteration, not held) and
// the step with the sum keeps θ finite. A push of a group not applied is
// a duplicate (applied before), a rejection (its own fields, or the
// group's gradient or optimizer step), or ErrRegroup. It returns the
// pushes applied, their samples and their arrivals (those with samples).
// With Spec.BalanceBase the leader weighted each gradient before summing
// (groupSum), so the sum is not weighted again.
func applyGroup(st *state, ps []Push, sum []byte, res []shardapi.PushResult, lr float64) (int, int64, int64) {
	for i, q := range ps {
		res[i].PushMeta, res[i].RecvNanos = q.PushMeta, q.RecvNanos
	}
	// fail applies nothing: it refuses with reason the push bad, or every
	// push when bad < 0; a duplicate is one, the others are to regroup.
	fail := func(bad int, reason shardapi.Reason, detail string) (int, int64, int64) {
		for i, q := range ps {
			if reason != 0 && (bad < 0 || bad == i) {
				res[i].Err = refuse(st, q, reason, detail)
			} else if st.gate.applied(q.Worker, q.Iter) {
				res[i].Duplicate = true
				st.tally.duplicate()
			} else {
				res[i].Err = ErrRegroup
			}
		}
		return 0, 0, 0
	}
	if !st.job.initialized {
		return fail(-1, shardapi.ReasonNotInitialized, "no Init entry applied")
	}
	seen := make(map[clock.WorkerID]bool, len(ps))
	var arrivals int64
	for i, q := range ps {
		if q.Samples > 0 {
			arrivals++
		}
		if reason, detail := checkPush(q.PushMeta, len(q.Grad), 0, st.job.spec); reason != 0 {
			return fail(i, reason, detail)
		}
		if st.ids.isRevoked(q.Worker) {
			return fail(i, shardapi.ReasonNotPeer, fmt.Sprintf("node %q is revoked", q.Worker))
		}
		if !st.gate.takes(q.Worker, q.Iter) || seen[q.Worker] {
			return fail(i, 0, "")
		}
		seen[q.Worker] = true
	}
	p := &st.params
	if reason, detail := p.decodeSum(sum); reason != 0 {
		return fail(-1, reason, detail)
	}
	if j := p.check(true, arrivals, st.gate.g.Len(), lr); j >= 0 {
		return fail(-1, shardapi.ReasonNonFiniteStep, fmt.Sprintf("parameter %d would become non-finite or reach ±2^64 (learning rate %g)", j, lr))
	}
	var samples int64
	applied := 0
	for i, q := range ps {
		out, err := st.gate.push(q)
		if err != nil {
			// Cannot happen after the checks above; recorded, not hidden.
			res[i].Err = fmt.Errorf("shard %d: summed push (%s, %d): %w", st.shard, q.Worker, q.Iter, err)
			continue
		}
		res[i].Applied, res[i].Outcome = true, out
		samples = satAdd(samples, q.Samples)
		applied++
		for _, f := range st.followers() {
			f.observe(q, st.gate.g)
		}
	}
	p.take(true)
	if faults.On(faults.Diverge) && faults.Coin(16) {
		clear(p.sum) // broken build only: this replica drops the gradients
	}
	return applied, samples, arrivals
}
