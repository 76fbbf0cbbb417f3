package shard

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"dsspmesh/balance"
	"dsspmesh/clock"
	"dsspmesh/internal/faults"
	"dsspmesh/shardapi"
)

// The balance layer in a shard (docs/design.md#balance): shard 0 hosts
// the Balancer, fed by the pushes the gate applies and its membership, and
// keeps the allocations in force as versions, so that its reply to push
// (w, iter) can name w's share of iteration iter+1 (every shard weighs
// gradients: params.weigh).

// allocVersion is one allocation and the iterations it is in force for:
// From until the next version's From. From is t_max+lead when it was
// decided, t_max being the highest clock the gate has had (no worker had
// been named its share of that iteration, so every worker's iteration uses
// one version and the slices of one round tile the data order without
// overlap).
type allocVersion struct {
	Version uint64           `msgpack:"v"`
	From    int64            `msgpack:"f"`
	Pos     int64            `msgpack:"p"` // data-order position of iteration From's global batch
	Global  int64            `msgpack:"g"`
	Workers []clock.WorkerID `msgpack:"w"` // sorted
	Batches []int64          `msgpack:"b"`
	Predict []int64          `msgpack:"t"` // predicted compute ns, 0 without a model
}

// balanceState is shard 0's balancer with its versions; off (b nil) on
// other shards and without the balance layer. It follows the gate (a
// follower, state.go) and its section is "bal", absent when off.
type balanceState struct {
	b        *balance.Balancer
	decided  int64          // the t_min Decide last ran at
	versions []allocVersion // oldest first: versions[0] is in force at t_min
	// hiMax is the highest t_max the gate had before a removal: removing
	// the worker at t_max lowers the gate's max, but not the iterations whose
	// shares its OKs already named (it may have computed and pushed them
	// before the removal), so a version must not come in force before
	// hiMax+lead either.
	hiMax int64
	// lead: a new version is in force from t_max+lead. 1, or 2 under
	// Spec.Pipeline, where a worker at clock c may be computing c+1 (its
	// push of c in flight), so t_max+1 may already be in use. Derived
	// from the spec, not stored.
	lead int64

	// Under Spec.BalanceStep (--local-steps auto): the round is step × h
	// samples a worker at an even share, h a power of two in [2, maxH]
	// sized at each Decide from the rounds the workers' links last asked
	// for (wants, sorted by worker; a leaver's is dropped). step and maxH
	// are derived from the spec; h and wants are replicated.
	step, maxH int64
	h          int64
	wants      []roundWant
}

// roundWant is the global round a worker's link last asked for
// (shardapi.PushMeta.Want).
type roundWant struct {
	Worker clock.WorkerID `msgpack:"w"`
	Round  int64          `msgpack:"r"`
}

// balanceSnapshot is balanceState in the snapshot header.
type balanceSnapshot struct {
	Balancer []byte         `msgpack:"b"`
	Decided  int64          `msgpack:"d"`
	Versions []allocVersion `msgpack:"v"`
	HiMax    int64          `msgpack:"h"`
	Steps    int64          `msgpack:"sh,omitempty"` // h under Spec.BalanceStep
	Wants    []roundWant    `msgpack:"wa,omitempty"`
}

// minAutoSteps is the round's steps a job under --local-steps auto with
// --balance starts at, and the fewest it takes.
const minAutoSteps = 2

// newBalanceState is the balancer a shard of spec keeps: on shard 0 with
// Spec.BalanceBase, off otherwise.
func newBalanceState(spec shardapi.Spec) (balanceState, error) {
	return newBalanceStateAt(spec, minAutoSteps)
}

// newBalanceStateAt is newBalanceState with the round at h steps under
// Spec.BalanceStep (a snapshot's).
func newBalanceStateAt(spec shardapi.Spec, h int64) (balanceState, error) {
	if spec.BalanceBase <= 0 || spec.Shard != 0 {
		return balanceState{}, nil
	}
	s := balanceState{lead: 1}
	base := spec.BalanceBase
	if spec.BalanceStep > 0 {
		s.step, s.maxH = spec.BalanceStep, spec.BalanceBase/spec.BalanceStep
		if h < minAutoSteps || h > s.maxH {
			return balanceState{}, fmt.Errorf("a round of %d steps outside [%d, %d]", h, minAutoSteps, s.maxH)
		}
		s.h, base = h, s.step*h
	}
	b, err := balance.New(balance.DefaultConfig(base))
	if err != nil {
		return balanceState{}, err
	}
	s.b = b
	if spec.Pipeline {
		s.lead = 2
	}
	return s, nil
}

func (s *balanceState) on() bool { return s.b != nil }

// observe records an applied push's timing and, under Spec.BalanceStep,
// the round its worker's link asks for.
func (s *balanceState) observe(p Push, _ *clock.Gate) {
	if p.Samples > 0 {
		s.b.Observe(string(p.Worker), p.Samples, p.ComputeNs)
	}
	if s.step > 0 && p.Want > 0 {
		i, ok := slices.BinarySearchFunc(s.wants, p.Worker, cmpWant)
		if ok {
			s.wants[i].Round = p.Want
		} else {
			s.wants = slices.Insert(s.wants, i, roundWant{Worker: p.Worker, Round: p.Want})
		}
	}
}

func cmpWant(w roundWant, id clock.WorkerID) int {
	return strings.Compare(string(w.Worker), string(id))
}

// join and leave follow the gate's membership.
func (s *balanceState) join(w clock.WorkerID, g *clock.Gate) {
	if s.b.Join(string(w), g.Min()) {
		s.record(g)
	}
}

func (s *balanceState) leave(w clock.WorkerID, g *clock.Gate) {
	if i, ok := slices.BinarySearchFunc(s.wants, w, cmpWant); ok {
		s.wants = slices.Delete(s.wants, i, i+1)
	}
	if !faults.On(faults.KeepLeaverShare) && s.b.Leave(string(w), g.Min()) { // broken builds keep it
		s.record(g)
	}
}

// leaving remembers the gate's t_max before a removal may lower it.
func (s *balanceState) leaving(_ clock.WorkerID, g *clock.Gate) {
	if !faults.On(faults.ForgetRemovedMax) { // broken builds only
		s.hiMax = max(s.hiMax, g.Max())
	}
}

// tick runs the balancer's decision when t_min has risen and drops the
// versions no iteration at or above t_min uses.
func (s *balanceState) tick(g *clock.Gate) {
	if m := g.Min(); m > s.decided {
		s.decided = m
		if h := s.roundSteps(); h != s.h {
			if err := s.b.Rescale(balance.DefaultConfig(s.step*h), m); err == nil {
				s.h = h
				s.record(g)
			}
		} else if s.b.Decide(m) {
			s.record(g)
		}
	}
	for len(s.versions) > 1 && s.versions[1].From <= g.Min() {
		s.versions = s.versions[1:]
	}
}

// roundSteps is the round's steps (h) the workers' links ask for under
// Spec.BalanceStep, h itself without auto or without a want: the fewest
// steps at an even share that give every worker the round it asked for,
// rounded up to a power of two, at most the largest in [2, maxH]
// whatever a worker asks (PushMeta.Want is bounded only by
// MaxPushSamples; maxH, auto:N, need not be a power of two). It grows as
// soon as one worker asks for more, and shrinks only once every want fits
// in less than 0.7 of the next smaller round, so wants that sit near a
// power of two do not flip the round back and forth (each change
// re-allocates).
func (s *balanceState) roundSteps() int64 {
	if s.step == 0 || len(s.wants) == 0 {
		return s.h
	}
	// The global round is step × h × the most workers present (balance.Balancer).
	per := s.step * max(s.b.Global()/(s.step*s.h), 1) // a step's samples at an even share, every worker
	var need int64
	for _, w := range s.wants {
		need = max(need, (w.Round+per-1)/per)
	}
	h := int64(minAutoSteps)
	for 2*h <= s.maxH && h < need {
		h *= 2
	}
	if h < s.h && 10*need > 7*(s.h/2) {
		return s.h
	}
	return h
}

// record appends the balancer's current allocation as a version in force
// from t_max+lead, an iteration no worker has been named its share of yet
// (t_max as high as it has been: hiMax); one not yet in force is replaced.
func (s *balanceState) record(g *clock.Gate) {
	a := s.b.Allocation()
	v := allocVersion{Version: a.Version, From: max(g.Max(), s.hiMax) + s.lead, Global: a.Global}
	for _, w := range a.Workers {
		v.Workers = append(v.Workers, clock.WorkerID(w.Worker))
		v.Batches = append(v.Batches, w.Batch)
		v.Predict = append(v.Predict, int64(w.PredictNs))
	}
	if n := len(s.versions); n > 0 {
		last := s.versions[n-1]
		v.Pos = satMulAdd(last.Pos, v.From-last.From, last.Global)
		if v.From <= last.From {
			v.From, v.Pos = last.From, last.Pos
			s.versions = s.versions[:n-1]
		}
	}
	s.versions = append(s.versions, v)
}

// assignments are w's shares for iteration iter+1, the one it computes
// after its push iter is answered, and (ahead, under Spec.Pipeline) for
// iter+2, which it computes while its push of iter+1 is in flight; nil
// without the balance layer or when w is in no version.
// Both are final once push iter is applied (docs/design.md, "Shares
// named are final").
func (s *balanceState) assignments(w clock.WorkerID, iter int64) (next, ahead *shardapi.Assignment) {
	if !s.on() || len(s.versions) == 0 {
		return nil, nil
	}
	next = s.assignment(w, iter+1)
	if s.lead > 1 {
		ahead = s.assignment(w, iter+2)
	}
	return next, ahead
}

// assignment is w's share for iteration t under the versions.
func (s *balanceState) assignment(w clock.WorkerID, t int64) *shardapi.Assignment {
	vs := s.versions
	k := len(vs) - 1
	for k > 0 && vs[k].From > t {
		k--
	}
	for j := k; j < len(vs); j++ {
		v := vs[j]
		i, ok := slices.BinarySearch(v.Workers, w)
		if !ok {
			continue
		}
		a := &shardapi.Assignment{Iter: t, Version: v.Version, Batch: v.Batches[i], Pos: -1, Global: v.Global, PredictNs: v.Predict[i]}
		if j == k && t >= v.From {
			a.Pos = satMulAdd(v.Pos, t-v.From, v.Global)
			if !faults.On(faults.OverlapShares) { // broken builds only
				for _, b := range v.Batches[:i] {
					a.Pos = satAdd(a.Pos, b)
				}
			}
		}
		return a
	}
	return nil
}

func (s *balanceState) save(h *header) error {
	if !s.on() {
		return nil
	}
	b, err := s.b.MarshalBinary()
	if err != nil {
		return fmt.Errorf("encode balance: %w", err)
	}
	h.put("bal", &balanceSnapshot{Balancer: b, Decided: s.decided, Versions: s.versions, HiMax: s.hiMax, Steps: s.h, Wants: s.wants})
	return nil
}

// load reads the section, present exactly when the job's spec wants the
// balancer.
func (s *balanceState) load(h *header, j job) error {
	if !j.initialized {
		if h.has("bal") {
			return errors.New("state in an uninitialised snapshot")
		}
		return nil
	}
	var snap *balanceSnapshot
	if _, err := h.get("bal", &snap); err != nil {
		return err
	}
	steps := int64(minAutoSteps)
	if snap != nil && snap.Steps != 0 {
		steps = snap.Steps
	}
	st, err := newBalanceStateAt(j.spec, steps)
	if err != nil {
		return fmt.Errorf("balance: %w", err)
	}
	if (snap != nil) != st.on() {
		return fmt.Errorf("balance: balance state present %v, spec wants it %v", snap != nil, st.on())
	}
	if snap != nil {
		if err := st.b.UnmarshalBinary(snap.Balancer); err != nil {
			return fmt.Errorf("balance: %w", err)
		}
		for i, v := range snap.Versions {
			if len(v.Batches) != len(v.Workers) || len(v.Predict) != len(v.Workers) ||
				!slices.IsSorted(v.Workers) || (i > 0 && v.From <= snap.Versions[i-1].From) {
				return fmt.Errorf("balance: allocation version %d is malformed", i)
			}
		}
		if !slices.IsSortedFunc(snap.Wants, func(a, b roundWant) int { return strings.Compare(string(a.Worker), string(b.Worker)) }) ||
			(len(snap.Wants) > 0 && st.step == 0) || (snap.Steps != 0) != (st.step > 0) {
			return fmt.Errorf("balance: the auto round's state (steps %d, %d wants) is malformed or not the spec's", snap.Steps, len(snap.Wants))
		}
		st.decided, st.versions, st.hiMax, st.wants = snap.Decided, snap.Versions, snap.HiMax, snap.Wants
	}
	*s = st
	return nil
}
