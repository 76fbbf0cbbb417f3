package shard

import (
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"dsspmesh/internal/faults"
	"dsspmesh/shardapi"
)

// proposer is the leader's middle stage (docs/design.md, "The leader by
// stage"): fill, group, run (propose), complete (in order), regroup.
type proposer struct {
	m   *member
	cnt *serviceCounters
	rp  *replier

	queue  chan *ticket
	slots  chan struct{}
	flight chan proposal

	mu sync.Mutex
	// inflight counts the pushes of entries proposed and not completed;
	// one in it may not join a summed group.
	inflight map[shardapi.PushID]int
}

// proposal is an entry in flight: its pushes in the entry's order.
type proposal struct {
	f     raft.ApplyFuture
	batch []*ticket
	start time.Time
}

func newProposer(m *member, cnt *serviceCounters, rp *replier) *proposer {
	return &proposer{m: m, cnt: cnt, rp: rp, queue: make(chan *ticket, 4*m.cfg.MaxBatchPushes),
		slots: make(chan struct{}, m.cfg.MaxInflightBatches), flight: make(chan proposal, m.cfg.MaxInflightBatches),
		inflight: map[shardapi.PushID]int{}}
}

// enqueue queues t, tracked for the replier's Pending frames until its
// reply is decided.
func (p *proposer) enqueue(t *ticket) {
	p.rp.track(t, 1)
	select {
	case p.queue <- t:
	case <-p.m.ctx.Done():
	}
}

// run batches queued pushes into entries. It takes an in-flight slot
// before draining the queue, so pushes that arrive while raft is busy
// share the next entry.
func (p *proposer) run() {
	for {
		var first *ticket
		select {
		case first = <-p.queue:
		case <-p.m.ctx.Done():
			return
		}
		select {
		case p.slots <- struct{}{}:
		case <-p.m.ctx.Done():
			return
		}
		batch, ok := p.fill(first)
		if !ok {
			return
		}
		batch, data, err := p.group(batch)
		if err != nil {
			<-p.slots
			for _, t := range batch {
				p.rp.track(t, -1)
				p.rp.reject(t.to.c, shardapi.OpPush, t.to.PushID, shardapi.ReasonBadRequest, err.Error())
			}
			continue
		}
		p.cnt.batches.Add(1)
		p.cnt.entryBytes.Add(uint64(len(data)))
		p.cnt.proposed.Add(uint64(len(batch)))
		p.flight <- proposal{start: time.Now(), f: p.m.raft.Apply(data, p.m.cfg.ApplyTimeout), batch: batch}
	}
}

// fill drains the queue into a batch that starts with first, up to the
// batch limits. Finding the queue empty with fewer pushes than the shard
// has workers, it waits up to BatchLinger for the others. It reports false
// when the replica stops.
func (p *proposer) fill(first *ticket) ([]*ticket, bool) {
	batch, bytes := []*ticket{first}, len(first.Grad)
	var linger <-chan time.Time
	for len(batch) < p.m.cfg.MaxBatchPushes && bytes < p.m.cfg.MaxBatchBytes {
		select {
		case t := <-p.queue:
			batch, bytes = append(batch, t), bytes+len(t.Grad)
			continue
		default:
		}
		workers := 0
		p.m.fsm.read(func(st *state) {
			if st.gate.g != nil {
				workers = st.gate.g.Len()
			}
		})
		if p.m.cfg.BatchLinger <= 0 || len(batch) >= workers {
			break
		}
		if linger == nil {
			linger = p.m.deps.Clock.After(p.m.cfg.BatchLinger)
		}
		select {
		case t := <-p.queue:
			batch, bytes = append(batch, t), bytes+len(t.Grad)
		case <-linger:
			return batch, true
		case <-p.m.ctx.Done():
			return batch, false
		}
	}
	return batch, true
}

// Replicate after aggregating (docs/design.md, step 4 of "One iteration,
// end to end"): the pushes of a batch the applied state says the gate will
// take travel as one summed gradient, applied all or nothing (applyGroup);
// a group not applied is proposed again (regroup).

// group orders batch as it will sit in the entry — the summed group first
// — and returns the entry's data. The pushes it puts in the group are
// marked in flight until complete clears them.
func (p *proposer) group(batch []*ticket) ([]*ticket, []byte, error) {
	spec := p.m.fsm.pushLimits()
	n, prec := spec.Len, spec.Precision
	var base int64 // the weight's base when the shard weighs pushes (Spec.Weighted)
	if spec.Weighted() {
		base = spec.BalanceBase
	}
	ok := make([]bool, len(batch))
	if p.m.cfg.SumBatches && len(batch) >= 2 && n > 0 && !faults.On(faults.SkipDedupe) && !faults.On(faults.SkipNonFinite) {
		p.mu.Lock()
		for i, t := range batch {
			ok[i] = p.inflight[t.PushID] == 0 && len(t.Grad) == prec.Bytes(n)
		}
		p.mu.Unlock()
		ps := make([]*Push, len(batch))
		for i, t := range batch {
			ps[i] = &t.Push
		}
		p.m.fsm.read(func(st *state) {
			if st.job.initialized {
				st.gate.summable(ps, ok)
			}
		})
	}
	var group, rest []*ticket
	for i, t := range batch {
		if ok[i] {
			group = append(group, t)
		} else {
			rest = append(rest, t)
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
	for i, t := range group {
		gp[i] = t.Push
	}
	for i, t := range rest {
		rp[i] = t.Push
	}
	data, err := encodeGroup(gp, sum, rp)
	if err != nil {
		return batch, nil, err
	}
	p.mu.Lock()
	for _, t := range batch {
		p.inflight[t.PushID]++
	}
	p.mu.Unlock()
	p.cnt.summed.Add(uint64(len(group)))
	return append(group, rest...), data, nil
}

// groupSum is the sum of the group's gradients, pushed in prec and encoded
// in prec.Sums(), each weighted as params.weigh weights a push's (samples /
// base, unless base is 0 or the push has exactly base samples), added in
// the group's order in float32 as params.check adds an entry's
// gradients.
func groupSum(group []*ticket, n int, prec shardapi.Precision, base int64) []byte {
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

// complete waits on proposals in order and hands their pushes to the
// replier with the entry's outcome.
func (p *proposer) complete() {
	for {
		var fl proposal
		select {
		case fl = <-p.flight:
		case <-p.m.ctx.Done():
			return
		}
		err := awaitFuture(p.m.ctx, fl.f)
		if err != nil && err == p.m.ctx.Err() {
			return
		}
		if err == nil && p.m.deps.ApplyTime != nil {
			p.m.deps.ApplyTime(time.Since(fl.start))
		}
		<-p.slots
		p.landed(fl.batch)
		if err != nil {
			// Ambiguous: the entry may still commit. The worker resends.
			for _, t := range fl.batch {
				if isLeadershipErr(err) {
					p.rp.notLeader(t.to.c, shardapi.OpPush, t.to.PushID)
				} else {
					p.rp.sendPush(t.to.c, t.to.PushID, shardapi.ReplyError, err.Error())
				}
			}
			continue
		}
		a, _ := fl.f.Response().(shardapi.Applied)
		for i, t := range fl.batch {
			if len(a.Pushes) != len(fl.batch) {
				p.rp.sendPush(t.to.c, t.to.PushID, shardapi.ReplyError, "entry not applied")
				continue
			}
			var rej *shardapi.RejectError
			if errors.As(a.Pushes[i].Err, &rej) {
				p.rp.reject(t.to.c, shardapi.OpPush, t.to.PushID, rej.Reason, rej.Detail)
				continue
			}
			if a.Pushes[i].Err == ErrRegroup {
				p.regroup(t)
				continue
			}
			p.rp.settle(t, afterApply)
		}
	}
}

// landed clears the pushes of a completed proposal from the in-flight set.
func (p *proposer) landed(batch []*ticket) {
	p.mu.Lock()
	for _, t := range batch {
		if p.inflight[t.PushID]--; p.inflight[t.PushID] <= 0 {
			delete(p.inflight, t.PushID)
		}
	}
	p.mu.Unlock()
	for _, t := range batch {
		p.rp.track(t, -1)
	}
}

// regroup proposes again a push whose summed group the FSM did not apply
// (ErrRegroup): nothing of the group changed, and the applied state now
// answers it (a duplicate, a worker removed) or it goes into a later
// entry, grouped by the state as it is then. The worker waits on the same
// stream, with Pending frames, as for any push not yet decided. The queue
// is fed from another goroutine: complete must not block on run, which
// may be waiting for a slot complete frees.
func (p *proposer) regroup(t *ticket) {
	p.cnt.regrouped.Add(1)
	if !p.rp.settle(t, onArrival) {
		return
	}
	p.rp.track(t, 1)
	p.m.wg.Add(1)
	go func() {
		defer p.m.wg.Done()
		select {
		case p.queue <- t:
		case <-p.m.ctx.Done():
		}
	}()
}
