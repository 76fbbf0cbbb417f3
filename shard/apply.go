package shard

import (
	"fmt"

	"dsspmesh/clock"
	"dsspmesh/mesh"
	"dsspmesh/shardapi"
)

// appliers are the entry kinds' (entry.go): each applies a decoded entry
// to the state, calling its sub-machines in order, and fills the entry's
// Applied. A new kind registers its applier here.
var appliers = [...]func(st *state, e entry, out *shardapi.Applied){
	entryInit:          applyInit,
	entryPush:          applyPushEntry,
	entryAddWorker:     applyAddWorker,
	entryRemoveWorker:  applyRemoveWorker,
	entrySuspendWorker: applySuspend,
	entryIdentity:      applyIdentity,
	entryAgree:         applyAgree,
	entryClaim:         applyClaim,
}

// applyInit fixes the job: its spec, the gate of its policy, the initial
// parameters and, on shard 0 under the balance layer, the balancer.
func applyInit(st *state, e entry, out *shardapi.Applied) {
	out.Kind, out.Err = "init", st.init(e)
}

func (st *state) init(e entry) error {
	if st.job.initialized {
		return fmt.Errorf("shard %d: %w: already initialised", st.shard, shardapi.ErrBadEntry)
	}
	if err := e.spec.Validate(); err != nil {
		return err
	}
	g, err := newGate(e.spec)
	if err != nil {
		return err
	}
	p, err := newParams(st.shard, e.spec, e.theta)
	if err != nil {
		return err
	}
	bal, err := newBalanceState(e.spec)
	if err != nil {
		return err
	}
	st.job, st.gate, st.params, st.bal = job{initialized: true, spec: e.spec}, g, p, bal
	return nil
}

// applyAddWorker places the worker at max(t_min, from) (gateState.add),
// unless the node is revoked, and tells the followers.
func applyAddWorker(st *state, e entry, out *shardapi.Applied) {
	w, from := e.worker, e.from
	out.Kind, out.Worker = "add-worker", w
	reject := func(reason shardapi.Reason, detail string) {
		out.Err = &shardapi.RejectError{Op: "add-worker", Shard: st.shard, Worker: w, Iter: from, Reason: reason, Detail: detail}
	}
	switch {
	case !st.job.initialized:
		out.Err = fmt.Errorf("shard %d: add worker %q: %w", st.shard, w, shardapi.ErrNotInitialized)
		return
	case from > shardapi.MaxIter:
		reject(shardapi.ReasonOutOfBounds, fmt.Sprintf("clock %d above the bound %d", from, int64(shardapi.MaxIter)))
		return
	case st.ids.isRevoked(w):
		st.tally.refuse(shardapi.ReasonNotPeer)
		reject(shardapi.ReasonNotPeer, fmt.Sprintf("node %q is revoked", w))
		return
	}
	out.StartClock, out.Released, out.Err = st.gate.add(w, from)
	if out.Err == nil {
		for _, f := range st.followers() {
			f.join(w, st.gate.g)
			f.tick(st.gate.g)
		}
	}
}

// applyRemoveWorker removes the worker; removing an absent one is a no-op.
func applyRemoveWorker(st *state, e entry, out *shardapi.Applied) {
	out.Kind, out.Worker = "remove-worker", e.worker
	switch {
	case !st.job.initialized:
		out.Err = fmt.Errorf("shard %d: remove worker %q: %w", st.shard, e.worker, shardapi.ErrNotInitialized)
	case st.gate.has(e.worker):
		out.Released, out.Err = st.remove(e.worker)
	}
}

// applySuspend removes the worker the leader suspected (suspect.go) if
// the gate could still suspend it at the clock the leader saw.
func applySuspend(st *state, e entry, out *shardapi.Applied) {
	out.Worker = e.worker
	if st.job.initialized && st.gate.suspendable(e.worker, e.from) {
		rel, err := st.remove(e.worker)
		if err == nil {
			out.Kind, out.Suspected, out.Released = "remove-worker", true, rel
			return
		}
		out.Err = err
	}
	out.Kind = "suspect"
}

// applyIdentity applies a revocation or a pin to the identity tables; a
// revoked node's worker leaves the gate, releasing those it held back.
func applyIdentity(st *state, e entry, out *shardapi.Applied) {
	h := e.ident
	w := clock.WorkerID(mesh.NodeID(h.ID))
	out.Kind, out.Worker = h.Op, w
	if refused := st.ids.apply(h); refused != "" {
		st.tally.refuse(shardapi.ReasonBadRequest)
		out.Err = &shardapi.RejectError{Op: h.Op, Shard: st.shard, Worker: w, Reason: shardapi.ReasonBadRequest, Detail: refused}
		return
	}
	if h.Op == "revoke" && st.job.initialized && st.gate.has(w) {
		out.Released, out.Err = st.remove(w)
	}
}

// applyAgree applies a check or an eviction to the agreement machine
// (agreement.go); the FSM then compares this replica's own digest.
func applyAgree(st *state, e entry, out *shardapi.Applied) {
	h := e.agree
	out.Kind = h.Op
	if h.Op == "check" && h.At >= uint64(st.index) {
		out.Err = fmt.Errorf("shard %d: %w: check of index %d in the entry at %d", st.shard, shardapi.ErrBadEntry, h.At, st.index)
		return
	}
	v, refused := st.agree.apply(h)
	switch {
	case refused != "":
		out.Err = &shardapi.RejectError{Op: h.Op, Shard: st.shard, Worker: clock.WorkerID(h.ID), Reason: shardapi.ReasonBadRequest, Detail: refused}
	case h.Op == "check" && !v.settled:
		out.Kind = "check-unsettled"
	}
}

// applyClaim records an evaluation claim made under the evaluation lease
// (claims.go).
func applyClaim(st *state, e entry, out *shardapi.Applied) {
	c := e.claim
	out.Kind, out.Worker = "claim", clock.WorkerID(c.By)
	if !st.job.initialized {
		out.Err = fmt.Errorf("shard %d: claim: %w", st.shard, shardapi.ErrNotInitialized)
		return
	}
	if refused := st.claims.apply(c, st.gate.evaluator(), uint64(st.index)); refused != "" {
		st.tally.refuse(shardapi.ReasonBadRequest)
		out.Err = &shardapi.RejectError{Op: "claim", Shard: st.shard, Worker: out.Worker, Reason: shardapi.ReasonBadRequest, Detail: refused}
	}
}

// remove takes w out of the gate, the followers told before and after; a
// removal, a suspension and a revocation leave the same state.
func (st *state) remove(w clock.WorkerID) ([]clock.Release, error) {
	fs := st.followers()
	for _, f := range fs {
		f.leaving(w, st.gate.g)
	}
	rel, err := st.gate.g.RemoveWorker(w)
	if err == nil {
		for _, f := range fs {
			f.leave(w, st.gate.g)
			f.tick(st.gate.g)
		}
	}
	return rel, err
}
