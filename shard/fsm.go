package shard

import (
	"crypto/sha256"
	"dsspmesh/shardapi"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"

	"github.com/hashicorp/raft"

	"dsspmesh/clock"
	"dsspmesh/internal/faults"
)

// FSM is the replicated state of one shard. See the package doc for the
// contract; raft drives Apply, Snapshot and Restore, everything else reads.
type FSM struct {
	shard    uint32
	observer func(shardapi.Applied)
	notify   chan struct{}
	// hashEvery > 0 puts the state hash in every Applied whose index is a
	// multiple of it (Deps.HashEvery); set before raft starts.
	hashEvery uint64

	mu          sync.RWMutex
	initialized bool
	spec        shardapi.Spec
	opt         shardapi.Optimizer
	theta       []float32
	velocity    []float32 // nil without momentum (hasVelocity)
	// arrivals are the outer Nesterov's arrivals since its last momentum
	// step (outer.go); 0 without it.
	arrivals   int64
	gate       *clock.Gate
	bal        *balanceState // shard 0 with Spec.BalanceBase > 0 (balance.go)
	samples    int64         // global samples applied: the schedule's input; saturates (satAdd)
	pushes     uint64        // saturates, as every counter here
	duplicates uint64
	rejected   [shardapi.NumReasons]uint64
	lastIndex  uint64
	ids        identityState // revoked ids and pinned keys (identity.go)

	// scratch of one push entry's Apply, taken from the node-wide pool
	// (scratch.go) and given back at its end; not part of the state. grad
	// is the decoded gradient of the push being examined, sum the sum of
	// those accepted so far.
	sum, grad []float32

	// frozen is the snapshot still reading θ and the velocity (Snapshot
	// until Persist has written them); an Apply then steps copies.
	frozen *fsmSnapshot

	// gen counts Restores, so that a cached encoding is never taken for
	// the state of a snapshot restored at the same index.
	gen uint64
	// enc caches θ encoded for replies (encodedLocked); not state.
	enc struct {
		mu         sync.Mutex
		b          []byte
		index, gen uint64
	}
}

// NewFSM returns an uninitialised FSM for shard. observer, if not nil, is
// called at the end of every Apply under the FSM's lock: it must not block
// or call back into the FSM.
func NewFSM(shard uint32, observer func(shardapi.Applied)) *FSM {
	return &FSM{shard: shard, observer: observer, notify: make(chan struct{}, 1)}
}

// applied returns the channel signalled (coalesced) after every Apply and
// Restore.
func (f *FSM) applied() <-chan struct{} { return f.notify }

func (f *FSM) signal() {
	select {
	case f.notify <- struct{}{}:
	default:
	}
}

// Apply applies one committed entry; the response is an Applied.
func (f *FSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	defer f.signal()
	f.lastIndex = l.Index
	out := shardapi.Applied{Index: l.Index}
	e, err := decodeEntry(l.Data)
	if err != nil {
		// Only a leader of another build could have written it; every
		// replica skips it alike.
		out.Kind, out.Err = "rejected", err
		f.rejected[shardapi.ReasonBadRequest] = satAddU(f.rejected[shardapi.ReasonBadRequest], 1)
	} else {
		switch e.kind {
		case entryInit:
			out.Kind, out.Err = "init", f.applyInit(e)
		case entryPush:
			out.Kind, out.Pushes = "push", f.applyPushes(e)
		case entryAddWorker:
			out.Kind, out.Worker = "add-worker", e.worker
			out.StartClock, out.Released, out.Err = f.applyAddWorker(e.worker, e.from)
		case entryRemoveWorker:
			out.Kind, out.Worker = "remove-worker", e.worker
			out.Released, out.Err = f.applyRemoveWorker(e.worker)
		case entrySuspendWorker:
			f.suspectedApplied(&out, e)
		case entryIdentity:
			f.applyIdentity(e.ident, &out)
		}
	}
	if f.observer != nil {
		if f.hashEvery > 0 && l.Index%f.hashEvery == 0 {
			if b, err := f.encodeLocked(); err == nil {
				out.StateHash = sha256.Sum256(b)
			}
			out.NonFinite = countNonFinite(f.theta) + countNonFinite(f.velocity)
		}
		f.observer(out)
	}
	return out
}

func (f *FSM) applyInit(e entry) error {
	if f.initialized {
		return fmt.Errorf("shard %d: %w: already initialised", f.shard, shardapi.ErrBadEntry)
	}
	if err := e.spec.Validate(); err != nil {
		return err
	}
	pol, _ := e.spec.GatePolicy() // Validate checked it
	g, err := clock.NewGate(pol)
	if err != nil {
		return err
	}
	theta := make([]float32, e.spec.Len)
	i, err := shardapi.FP32.Decode(theta, e.theta)
	if err != nil {
		return fmt.Errorf("shard %d: %w: initial parameters: %w", f.shard, shardapi.ErrBadEntry, err)
	}
	if i >= 0 {
		return fmt.Errorf("shard %d: %w: initial parameter %d is %v", f.shard, shardapi.ErrBadEntry, i, theta[i])
	}
	if e.spec.BalanceBase > 0 && e.spec.Shard == 0 {
		if f.bal, err = newBalanceState(e.spec); err != nil {
			return err
		}
	}
	f.initialized, f.spec, f.opt, f.gate, f.theta = true, e.spec, e.spec.Optimizer, g, theta
	if hasVelocity(e.spec) {
		f.velocity = make([]float32, e.spec.Len)
	}
	return nil
}

// applyPushes applies a push entry: its summed group (if any) as one, then
// each other push; the gradients accepted make one optimizer step.
func (f *FSM) applyPushes(e entry) []shardapi.PushResult {
	ps := e.pushes
	res := make([]shardapi.PushResult, len(ps))
	if f.initialized {
		defer func() {
			scratch.put(f.sum)
			scratch.put(f.grad)
			f.sum, f.grad = nil, nil
		}()
	}
	accepted := 0
	var samples, arrivals int64          // arrivals: accepted pushes with samples (the outer rule's count)
	lr := f.opt.Schedule.Rate(f.samples) // one step per entry, at the rate before it
	if f.spec.Outer.On() {
		lr = f.spec.Outer.LR // the outer rule's (outer.go), constant; named in a refusal
	}
	if e.summed > 0 {
		if n, s, a := f.applyGroup(ps[:e.summed], e.sum, res[:e.summed], lr); n > 0 {
			accepted, samples, arrivals = n, s, a
		}
	}
	for i := e.summed; i < len(ps); i++ {
		p := ps[i]
		r := &res[i]
		r.PushMeta, r.RecvNanos = p.PushMeta, p.RecvNanos
		if reason, detail := f.check(p); reason != 0 {
			r.Err = f.reject(p, reason, detail)
			continue
		}
		f.weigh(p.Samples)
		// The step with this gradient added must leave every parameter
		// finite. The check runs before the gate sees the push, so a
		// refused push changes nothing; it is pure arithmetic on the
		// replicated state, so every replica decides alike.
		arrival := int64(0)
		if p.Samples > 0 {
			arrival = 1
		}
		if j := f.sumAndCheck(accepted == 0, arrivals+arrival, lr); j >= 0 && !faults.On(faults.SkipNonFinite) {
			r.Err = f.reject(p, shardapi.ReasonNonFiniteStep, fmt.Sprintf("parameter %d would become non-finite or reach ±2^64 (learning rate %g)", j, lr))
			continue
		}
		out, err := f.gate.Push(p.Worker, p.Iter, p.RecvNanos)
		if dup := (*clock.DuplicatePushError)(nil); errors.As(err, &dup) && faults.On(faults.SkipDedupe) {
			err, out.Released = nil, true // broken build only: applied again
		}
		if err != nil {
			var dup *clock.DuplicatePushError
			if errors.As(err, &dup) {
				r.Duplicate = true
				f.duplicates = satAddU(f.duplicates, 1)
				continue
			}
			r.Err = f.reject(p, gateReason(err), err.Error())
			continue
		}
		r.Applied, r.Outcome = true, out
		if faults.On(faults.SkipStaleness) {
			r.Outcome.Released = true // broken build only: the gate's hold ignored
		}
		switch {
		case faults.On(faults.Diverge) && faults.Coin(16):
			// broken build only: this replica drops the gradient
			if accepted == 0 {
				f.take(true)
				clear(f.sum)
			}
		default:
			f.take(accepted == 0) // the checked sum becomes the sum
		}
		accepted++
		arrivals += arrival
		samples = satAdd(samples, p.Samples)
		f.balanceObserve(p)
	}
	if f.initialized {
		f.balanceTick()
	}
	if accepted > 0 {
		f.thawLocked()
		f.stepLocked(lr, arrivals)
		f.samples = satAdd(f.samples, samples)
		f.pushes = satAddU(f.pushes, uint64(accepted))
	}
	return res
}

// ErrRegroup is the outcome of a push of a summed group the FSM did not
// apply because another push of the group could not be (a duplicate, a
// removed worker, ...): nothing of the group changed, and the leader
// proposes the push again (service.regroup); its worker never sees it.
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
func (f *FSM) applyGroup(ps []Push, sum []byte, res []shardapi.PushResult, lr float64) (int, int64, int64) {
	for i, p := range ps {
		res[i].PushMeta, res[i].RecvNanos = p.PushMeta, p.RecvNanos
	}
	// fail applies nothing: it refuses with reason the push bad, or every
	// push when bad < 0; a duplicate is one, the others are to regroup.
	fail := func(bad int, reason shardapi.Reason, detail string) (int, int64, int64) {
		for i, p := range ps {
			if reason != 0 && (bad < 0 || bad == i) {
				res[i].Err = f.reject(p, reason, detail)
			} else if c, ok := f.gate.Clock(p.Worker); ok && p.Iter < c {
				res[i].Duplicate = true
				f.duplicates = satAddU(f.duplicates, 1)
			} else {
				res[i].Err = ErrRegroup
			}
		}
		return 0, 0, 0
	}
	if !f.initialized {
		return fail(-1, shardapi.ReasonNotInitialized, "no Init entry applied")
	}
	seen := make(map[clock.WorkerID]bool, len(ps))
	var arrivals int64
	for i, p := range ps {
		if p.Samples > 0 {
			arrivals++
		}
		if reason, detail := checkPush(p.PushMeta, len(p.Grad), 0, f.spec); reason != 0 {
			return fail(i, reason, detail)
		}
		if f.revokedLocked(p.Worker) {
			return fail(i, shardapi.ReasonNotPeer, fmt.Sprintf("node %q is revoked", p.Worker))
		}
		c, ok := f.gate.Clock(p.Worker)
		if !ok || c != p.Iter || f.gate.IsWaiting(p.Worker) || seen[p.Worker] {
			return fail(i, 0, "")
		}
		seen[p.Worker] = true
	}
	sp := f.spec.Precision.Sums()
	if len(sum) != sp.Bytes(f.spec.Len) {
		return fail(-1, shardapi.ReasonBadLength, fmt.Sprintf("summed gradient of %d bytes, want %d (%s)", len(sum), sp.Bytes(f.spec.Len), sp))
	}
	if i, _ := sp.Decode(f.gradBuf(), sum); i >= 0 {
		return fail(-1, shardapi.ReasonNonFinite, fmt.Sprintf("summed value %d is %v", i, f.grad[i]))
	}
	if j := f.sumAndCheck(true, arrivals, lr); j >= 0 {
		return fail(-1, shardapi.ReasonNonFiniteStep, fmt.Sprintf("parameter %d would become non-finite or reach ±2^64 (learning rate %g)", j, lr))
	}
	var samples int64
	applied := 0
	for i, p := range ps {
		out, err := f.gate.Push(p.Worker, p.Iter, p.RecvNanos)
		if err != nil {
			// Cannot happen after the checks above; recorded, not hidden.
			res[i].Err = fmt.Errorf("shard %d: summed push (%s, %d): %w", f.shard, p.Worker, p.Iter, err)
			continue
		}
		res[i].Applied, res[i].Outcome = true, out
		if faults.On(faults.SkipStaleness) {
			res[i].Outcome.Released = true // broken build only: the gate's hold ignored
		}
		samples = satAdd(samples, p.Samples)
		applied++
		f.balanceObserve(p)
	}
	f.take(true)
	if faults.On(faults.Diverge) && faults.Coin(16) {
		clear(f.sum) // broken build only: this replica drops the gradients
	}
	return applied, samples, arrivals
}

// sumAndCheck returns the first parameter that a step with the entry's
// gradient sum with f.grad added (f.grad alone when first) would make
// non-finite (or whose velocity would be), or −1. It repeats step's
// arithmetic exactly, float32 rounding included, without writing the
// candidate sum anywhere: [FSM.take] makes it the sum once the push is
// accepted. arrivals is the entry's arrivals with this push's (the outer
// rule's momentum step depends on them).
func (f *FSM) sumAndCheck(first bool, arrivals int64, lr float64) int {
	if f.spec.Outer.On() {
		var sum []float32
		if !first {
			sum = f.sum
		}
		r := f.outerRates()
		return firstBadOuterStep(f.spec.Outer, r, f.theta, f.velocity, sum, f.grad, f.outerStarts(arrivals), f.outerFires(r, arrivals))
	}
	if first {
		return firstNonFiniteStep(f.opt, f.theta, f.velocity, f.grad, lr)
	}
	return firstNonFiniteStepSum(f.opt, f.theta, f.velocity, f.sum, f.grad, lr)
}

// stepLocked applies the entry's sum f.sum of arrivals arrivals: the
// optimizer's step at rate lr, or under an outer rule its step (outer.go).
func (f *FSM) stepLocked(lr float64, arrivals int64) {
	if !f.spec.Outer.On() {
		step(f.opt, f.theta, f.velocity, f.sum, lr)
		return
	}
	r := f.outerRates()
	fire := f.outerFires(r, arrivals)
	outerStep(f.spec.Outer, r, f.theta, f.velocity, f.sum, f.outerStarts(arrivals), fire)
	if fire {
		f.arrivals = 0
	} else {
		f.arrivals = satAdd(f.arrivals, arrivals)
	}
}

// take makes the sum sumAndCheck checked the entry's sum: f.grad itself
// when first (the buffers swap), else f.sum + f.grad, added in float32 as
// sumAndCheck added them.
func (f *FSM) take(first bool) {
	if first {
		f.sum, f.grad = f.grad, f.sum
		return
	}
	for j, g := range f.grad {
		f.sum[j] += g
	}
}

// gradBuf returns f.grad, borrowing it from the pool first if the entry's
// Apply has none yet: an entry of one push (or one summed group) borrows
// one buffer, which take then makes the sum.
func (f *FSM) gradBuf() []float32 {
	if f.grad == nil {
		f.grad = scratch.get(f.spec.Len)
	}
	return f.grad
}

// check validates p against the shard (checkPush) and decodes its
// gradient into f.grad.
func (f *FSM) check(p Push) (shardapi.Reason, string) {
	if !f.initialized {
		return shardapi.ReasonNotInitialized, "no Init entry applied"
	}
	if reason, detail := checkPush(p.PushMeta, len(p.Grad), f.spec.Len, f.spec); reason != 0 {
		return reason, detail
	}
	if f.revokedLocked(p.Worker) {
		return shardapi.ReasonNotPeer, fmt.Sprintf("node %q is revoked", p.Worker)
	}
	if i, _ := f.spec.Precision.Decode(f.gradBuf(), p.Grad); i >= 0 && !faults.On(faults.SkipNonFinite) {
		return shardapi.ReasonNonFinite, fmt.Sprintf("value %d is %v", i, f.grad[i])
	}
	if p.Samples == 0 {
		var sq float64
		for _, x := range f.grad {
			sq += float64(x) * float64(x)
		}
		return checkZeroSamples(0, sq)
	}
	return 0, ""
}

func (f *FSM) reject(p Push, reason shardapi.Reason, detail string) error {
	f.rejected[reason] = satAddU(f.rejected[reason], 1)
	return &shardapi.RejectError{Shard: f.shard, Worker: p.Worker, Iter: p.Iter, Reason: reason, Detail: detail}
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

// applyAddWorker places w at max(t_min, from): a new worker joins at the
// slowest's clock unless its other shards already have it further; a
// present worker below from is advanced there (clock.Gate.AdvanceWorker),
// so a worker's clock is the same on every shard. A resent AddWorker is
// harmless: it never moves a clock back.
func (f *FSM) applyAddWorker(w clock.WorkerID, from int64) (int64, []clock.Release, error) {
	if !f.initialized {
		return 0, nil, fmt.Errorf("shard %d: add worker %q: %w", f.shard, w, shardapi.ErrNotInitialized)
	}
	if from > shardapi.MaxIter {
		return 0, nil, &shardapi.RejectError{Op: "add-worker", Shard: f.shard, Worker: w, Iter: from, Reason: shardapi.ReasonOutOfBounds,
			Detail: fmt.Sprintf("clock %d above the bound %d", from, int64(shardapi.MaxIter))}
	}
	if f.revokedLocked(w) {
		f.rejected[shardapi.ReasonNotPeer] = satAddU(f.rejected[shardapi.ReasonNotPeer], 1)
		return 0, nil, &shardapi.RejectError{Op: "add-worker", Shard: f.shard, Worker: w, Iter: from, Reason: shardapi.ReasonNotPeer,
			Detail: fmt.Sprintf("node %q is revoked", w)}
	}
	if _, ok := f.gate.Clock(w); !ok {
		if _, err := f.gate.AddWorker(w); err != nil {
			return 0, nil, err
		}
	}
	c, rel, err := f.gate.AdvanceWorker(w, from)
	if err == nil {
		f.balanceJoin(w)
		f.balanceTick()
	}
	return c, rel, err
}

// applyRemoveWorker removes w; removing an absent worker is a no-op.
func (f *FSM) applyRemoveWorker(w clock.WorkerID) ([]clock.Release, error) {
	if !f.initialized {
		return nil, fmt.Errorf("shard %d: remove worker %q: %w", f.shard, w, shardapi.ErrNotInitialized)
	}
	if _, ok := f.gate.Clock(w); !ok {
		return nil, nil
	}
	return f.removeWorker(w)
}

// removeWorker takes w out of the gate and, under the balance layer, its
// share of the global batch from the next allocation on: a removal and a
// suspension leave the same state.
func (f *FSM) removeWorker(w clock.WorkerID) ([]clock.Release, error) {
	if !faults.On(faults.ForgetRemovedMax) { // broken builds only
		f.balanceHoldMax()
	}
	rel, err := f.gate.RemoveWorker(w)
	if err == nil {
		if !faults.On(faults.KeepLeaverShare) {
			f.balanceLeave(w)
		}
		f.balanceTick()
	}
	return rel, err
}

// replyState is what the service needs to answer a push (w, iter).
type replyState uint8

const (
	replyOK      replyState = iota + 1 // applied and not held: send OK
	replyHeld                          // applied and held by the gate
	replyPending                       // not applied yet (iter ≥ clock)
	replyUnknown                       // worker not in the table
)

// replyFor decides the reply to (w, iter) from the applied state, and when
// it is OK returns the state's version and, if slice, the parameters
// encoded in the shard's wire precision, read under the same lock
// (docs/design.md, "The read guarantee"). The encoding is made once per
// applied index and shared by every reply at that index: the caller must
// not modify it.
func (f *FSM) replyFor(w clock.WorkerID, iter int64, slice bool) (replyState, []byte, shardapi.Version) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if !f.initialized {
		return replyPending, nil, shardapi.Version{}
	}
	c, ok := f.gate.Clock(w)
	switch {
	case !ok:
		return replyUnknown, nil, shardapi.Version{}
	case c <= iter:
		return replyPending, nil, shardapi.Version{}
	case c == iter+1 && f.gate.IsWaiting(w) && !faults.On(faults.SkipStaleness):
		return replyHeld, nil, shardapi.Version{}
	}
	if !slice {
		return replyOK, nil, f.versionLocked()
	}
	if faults.On(faults.StaleRead) {
		b, v := f.staleSlice() // broken build only
		return replyOK, b, v
	}
	return replyOK, f.encodedLocked(), f.versionLocked()
}

// versionLocked is the version of the current parameters; f.mu held.
func (f *FSM) versionLocked() shardapi.Version {
	return shardapi.Version{Index: f.lastIndex, Min: f.gate.Min(), Samples: f.samples}
}

// encodedLocked returns θ in the parameters' precision (Precision.Params)
// as of the applied index, encoding it on the first call after an Apply or
// Restore. Under f.mu held for reading θ does not change; enc.mu orders
// the readers that build it.
func (f *FSM) encodedLocked() []byte {
	f.enc.mu.Lock()
	defer f.enc.mu.Unlock()
	if f.enc.b == nil || f.enc.index != f.lastIndex || f.enc.gen != f.gen {
		// A new slice every time: replies still being sent hold the old.
		f.enc.b, f.enc.index, f.enc.gen = f.spec.Precision.Params().Append(nil, f.theta), f.lastIndex, f.gen
	}
	return f.enc.b
}

// Params copies the parameter slice into dst (grown if short) and returns it.
func (f *FSM) Params(dst []float32) []float32 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	dst = append(dst[:0], f.theta...)
	return dst
}

// paramsNorm is the Euclidean norm of the parameter slice (the outlier
// rule's floor for a round's pseudo-gradient, hygiene.go).
func (f *FSM) paramsNorm() float64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var sq float64
	for _, v := range f.theta {
		sq += float64(v) * float64(v)
	}
	return math.Sqrt(sq)
}

// Workers is the number of workers the gate knows (0 before Init).
func (f *FSM) Workers() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.gate == nil {
		return 0
	}
	return f.gate.Len()
}

// Status returns the current view.
func (f *FSM) Status() shardapi.Status {
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := shardapi.Status{Shard: f.shard, Initialized: f.initialized, Spec: f.spec, AppliedIndex: f.lastIndex,
		Samples: f.samples, Pushes: f.pushes, Duplicates: f.duplicates, Rejected: map[string]uint64{}}
	for r := shardapi.Reason(1); r < shardapi.NumReasons; r++ {
		if n := f.rejected[r]; n > 0 {
			s.Rejected[r.String()] = n
		}
	}
	if f.gate != nil {
		s.Min, s.Max, s.Gate = f.gate.Min(), f.gate.Max(), f.gate.Totals()
		for _, w := range f.gate.Workers() {
			info, _ := f.gate.Worker(w)
			s.Workers = append(s.Workers, info)
		}
	}
	return s
}

// StateHash is SHA-256 of the state's snapshot encoding: equal on replicas
// that applied the same entries.
func (f *FSM) StateHash() [32]byte {
	f.mu.RLock()
	defer f.mu.RUnlock()
	b, err := f.encodeLocked()
	if err != nil {
		return [32]byte{}
	}
	return sha256.Sum256(b)
}

// AppliedIndex is the raft index of the last applied entry.
func (f *FSM) AppliedIndex() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.lastIndex
}

// Snapshot captures the state; raft persists it on another goroutine.
// It encodes the header and takes θ and the velocity as they are, copying
// nothing: until Persist has written them the FSM is frozen, and an Apply
// in that time steps a copy of them instead (thawLocked). A snapshot of a
// large shard used to copy its 25 MB every time; an entry that arrives
// while one is written is rare (a shard applies one every second or so of
// the 100 MB model's mesh; writing takes tens of milliseconds). The copy
// an Apply may make is what snapshotMem bounds: this process's replicas
// that snapshot together wait their turn rather than each risk one. The
// wait is taken before the FSM's lock.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	n := f.stateBytes()
	snapshotMem.acquire(n)
	f.mu.Lock()
	defer f.mu.Unlock()
	head, err := f.headLocked()
	if err != nil {
		snapshotMem.release(n)
		return nil, err
	}
	s := &fsmSnapshot{f: f, head: head, theta: f.theta, velocity: f.velocity, held: n}
	f.frozen = s
	return s, nil
}

// thawLocked makes θ and the velocity the FSM's own again before an Apply
// changes them, if a snapshot still reads them.
func (f *FSM) thawLocked() {
	if f.frozen == nil {
		return
	}
	f.theta, f.velocity = slices.Clone(f.theta), slices.Clone(f.velocity)
	f.frozen = nil
}

// Restore replaces the state with a snapshot's. It reads no more than
// the snapshot's own header says it holds, plus one byte to refuse a longer
// one (see readSnapshot).
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	st, err := readSnapshot(rc)
	if err != nil {
		return fmt.Errorf("shard %d: read snapshot: %w", f.shard, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.installLocked(st)
	f.gen++
	f.signal()
	return nil
}

type fsmSnapshot struct {
	f               *FSM
	head            []byte
	theta, velocity []float32 // the FSM's own until unfreeze, read only
	held            int64     // of snapshotMem, given back by Release
	once            sync.Once
}

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	_, err := sink.Write(s.head)
	if err == nil {
		err = writeBody(sink, s.theta, s.velocity)
	}
	s.unfreeze() // the bytes are in the sink; its fsync needs no state
	if err != nil {
		return errors.Join(err, sink.Cancel())
	}
	return sink.Close()
}

// unfreeze lets the FSM step θ in place again, unless an Apply has
// already stepped a copy (or a Restore replaced it).
func (s *fsmSnapshot) unfreeze() {
	s.f.mu.Lock()
	if s.f.frozen == s {
		s.f.frozen = nil
	}
	s.f.mu.Unlock()
}

// Release unfreezes the FSM and gives the bytes back to snapshotMem (raft
// calls it once the snapshot is persisted or abandoned).
func (s *fsmSnapshot) Release() {
	s.once.Do(func() {
		s.unfreeze()
		s.theta, s.velocity, s.head = nil, nil, nil
		snapshotMem.release(s.held)
	})
}

// firstNonFinite returns the index of the first NaN or ±Inf in v, or −1.
func firstNonFinite(v []float32) int {
	for i, x := range v {
		if math.Float32bits(x)&0x7f800000 == 0x7f800000 {
			return i
		}
	}
	return -1
}

func countNonFinite(v []float32) int {
	n := 0
	for _, x := range v {
		if math.Float32bits(x)&0x7f800000 == 0x7f800000 {
			n++
		}
	}
	return n
}

// stateBytes is the size of the parameters and optimizer state a
// snapshot holds (fp32), 0 before Init.
func (f *FSM) stateBytes() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return 4 * int64(len(f.theta)+len(f.velocity))
}

// pushLimits is what the leader checks a push against before proposing
// it: the shard's spec (its length 0 before Init).
func (f *FSM) pushLimits() shardapi.Spec {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.spec
}
