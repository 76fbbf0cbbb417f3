package shardapi

import (
	"fmt"
	"math"

	"dsspmesh/clock"
)

// OptimizerKind names the update rule.
type OptimizerKind uint8

const (
	SGD      OptimizerKind = iota + 1 // θ −= lr·g
	Momentum                          // v = μ·v + g; θ −= lr·v
)

func (k OptimizerKind) String() string {
	switch k {
	case SGD:
		return "sgd"
	case Momentum:
		return "momentum"
	}
	return fmt.Sprintf("optimizer(%d)", uint8(k))
}

// Optimizer is the update rule and its learning-rate schedule. The schedule
// is a function of the global samples applied to the shard, so every
// paradigm (and every replica) uses the same rate at the same progress.
type Optimizer struct {
	Kind     OptimizerKind `msgpack:"k"`
	Momentum float64       `msgpack:"m"` // μ for Momentum, 0 for SGD
	Schedule Schedule      `msgpack:"s"`
}

// Schedule is a step decay: lr = LR · Gamma^⌊samples / StepSamples⌋, constant
// when StepSamples is 0.
type Schedule struct {
	LR          float64 `msgpack:"lr"`
	Gamma       float64 `msgpack:"g"`
	StepSamples int64   `msgpack:"st"`
}

// DefaultOptimizer is momentum 0.9 at a constant 0.01.
func DefaultOptimizer() Optimizer {
	return Optimizer{Kind: Momentum, Momentum: 0.9, Schedule: Schedule{LR: 0.01, Gamma: 1}}
}

// Validate names the first bad value.
func (o Optimizer) Validate() error {
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case o.Kind != SGD && o.Kind != Momentum:
		return fmt.Errorf("shard: Optimizer.Kind %d is not sgd or momentum", o.Kind)
	case o.Kind == SGD && o.Momentum != 0:
		return fmt.Errorf("shard: Optimizer.Momentum %g must be 0 for sgd", o.Momentum)
	case !finite(o.Momentum) || o.Momentum < 0 || o.Momentum >= 1:
		return fmt.Errorf("shard: Optimizer.Momentum %g must be in [0, 1)", o.Momentum)
	case !finite(o.Schedule.LR) || o.Schedule.LR <= 0 || o.Schedule.LR > math.MaxFloat32:
		return fmt.Errorf("shard: Schedule.LR %g must be positive and finite in float32", o.Schedule.LR)
	case !finite(o.Schedule.Gamma) || o.Schedule.Gamma <= 0 || o.Schedule.Gamma > 1:
		return fmt.Errorf("shard: Schedule.Gamma %g must be in (0, 1]", o.Schedule.Gamma)
	case o.Schedule.StepSamples < 0:
		return fmt.Errorf("shard: Schedule.StepSamples %d must not be negative", o.Schedule.StepSamples)
	}
	return nil
}

// Rate is the learning rate after samples global samples. For a valid
// schedule it is finite and in [0, LR] for every samples: a negative count
// (which a shard's saturating counter never holds) is read as 0, so the
// exponent ⌊samples / StepSamples⌋ is never negative and Gamma^k, with
// Gamma in (0, 1], is in [0, 1]. A rate that decays below the smallest
// float32 is 0: the steps then leave θ as it is, the schedule's own end,
// not an error.
func (s Schedule) Rate(samples int64) float64 {
	if s.StepSamples <= 0 || s.Gamma == 1 {
		return s.LR
	}
	return s.LR * math.Pow(s.Gamma, float64(max(samples, 0)/s.StepSamples))
}

// Spec describes a shard; it is fixed by the Init entry.
type Spec struct {
	Shard     uint32    `msgpack:"shard"`
	Len       int       `msgpack:"len"`    // float32 parameters in the slice
	Policy    string    `msgpack:"policy"` // clock.ParsePolicy text, e.g. "dssp:3:12"
	Optimizer Optimizer `msgpack:"opt"`
	// OutlierFactor: the leader refuses a push whose gradient norm
	// exceeds OutlierFactor × the median norm of the shard's recent pushes
	// (a flaky accelerator, a hostile member; see Outlier); 0 is
	// DefaultOutlierFactor. The check cannot be turned off.
	OutlierFactor float64 `msgpack:"of,omitempty"`
	// BalanceBase > 0 turns on the balance layer (docs/design.md#balance):
	// each push's gradient is weighted by its samples / BalanceBase (the
	// job's per-worker batch), and shard 0 sizes every worker's batch.
	BalanceBase int64 `msgpack:"bb,omitempty"`
	// BalanceStep > 0 (with BalanceBase) is the balance layer under
	// --local-steps auto: the job's batch a local step. Shard 0 then sizes
	// the round itself, BalanceStep × H samples a worker at an even share,
	// H a power of two in [2, BalanceBase/BalanceStep] chosen from the
	// rounds the workers' links ask for (PushMeta.Want); BalanceBase is
	// the round at that bound. 0 without auto and in a spec written before
	// the field existed.
	BalanceStep int64 `msgpack:"bs,omitempty"`
	// Batch is the job's per-worker batch: without the balance layer no
	// push may claim more samples (MaxPushSamples). 0 (a spec written
	// without it) is MaxBatch.
	Batch int64 `msgpack:"bt,omitempty"`
	// Precision is the layout of the gradients pushed, on the wire and in
	// the log, and, through Precision.Params and Precision.Sums, of the
	// parameter slices an OK reply carries and of a leader's summed
	// gradients (tensor.go); the FSM keeps fp32 master weights whatever it
	// is. Zero is fp32.
	Precision Precision `msgpack:"wp,omitempty"`
	// Pipeline: the job's workers compute one iteration ahead, iteration
	// t+1 while their push of t is in flight (docs/design.md, "The read
	// guarantee"). The gate then releases by Policy's clock.Policy.Pipelined
	// (s_L − 1), so the slices an iteration computes on stay within Policy's
	// bound, and shard 0 puts allocations in force from t_max+2 (not +1)
	// and names in its OK to push iter the assignments of iter+1 and
	// iter+2. False in a spec written before the field existed.
	Pipeline bool `msgpack:"pl,omitempty"`
	// Outer is the outer optimizer of a job of local rounds (outer.go):
	// pushes then carry pseudo-gradients, applied by Outer's rule instead
	// of Optimizer's, and Batch (and BalanceBase) count a round's samples,
	// the job's batch × its local steps. Zero (none) in a spec written
	// before local rounds and in a job without them.
	Outer Outer `msgpack:"out,omitempty"`
}

// GatePolicy is the policy the shard's gate releases by: Policy, or
// Policy.Pipelined() under Pipeline.
func (s Spec) GatePolicy() (clock.Policy, error) {
	p, err := clock.ParsePolicy(s.Policy)
	if err != nil || !s.Pipeline {
		return p, err
	}
	return p.Pipelined()
}

// Outlier factor range: below 2 a healthy job's spread of norms would be
// refused; above 1e6 the check could never fire on float32 gradients.
// DefaultOutlierFactor is the factor of a spec that names none (and of
// every spec written before the check was on by default): far above the
// spread of a healthy job's norms (docs/design.md, "The outlier rule"),
// far below the push that destroys a model.
const (
	MinOutlierFactor     = 2
	MaxOutlierFactor     = 1e6
	DefaultOutlierFactor = 100
)

// Outlier is the outlier factor the leader checks pushes with:
// OutlierFactor, or DefaultOutlierFactor when it is 0.
func (s Spec) Outlier() float64 {
	if s.OutlierFactor == 0 {
		return DefaultOutlierFactor
	}
	return s.OutlierFactor
}

// Bounds of a push's fields (checked by the shard before it proposes a
// push and again as every replica applies it, so every replica refuses
// alike; the bounds are constants or derived from the spec alone):
//
//   - MaxBatch is the most samples of one worker's batch: the bound of
//     the job's --batch.
//   - MaxBalanceWorkers × BalanceBase bounds a push's samples under the
//     balance layer, which may give one worker more than the job's batch
//     (up to the global batch, BalanceBase × the most workers present):
//     room for that many workers.
//   - MaxIter bounds a push's iteration and an AddWorker's clock: no clock
//     reaches it at 1000 iterations a second in 30 years, and t + a global
//     batch × t stays far inside int64 (no clock or data position wraps).
//   - MaxComputeNs bounds a push's compute time (an iteration of a day).
const (
	MaxBatch          = 1 << 16
	MaxBalanceWorkers = 256
	MaxIter           = 1 << 40
	MaxComputeNs      = int64(24 * 3600 * 1e9)
)

// MaxPushSamples is the most samples one push may claim in a job of spec
// s: MaxBalanceWorkers × BalanceBase under the balance layer, else Batch
// (MaxBatch when the spec names none). Samples feed the replicated sample
// count (the schedule's input) and, under the balance layer, the weight
// of the push's gradient.
func (s Spec) MaxPushSamples() int64 {
	switch {
	case s.BalanceBase > 0:
		return MaxBalanceWorkers * s.BalanceBase
	case s.Batch > 0:
		return s.Batch
	}
	return MaxBatch
}

// Validate names the first bad value.
func (s Spec) Validate() error {
	if s.Len <= 0 || s.Len > MaxShardLen {
		return fmt.Errorf("shard: Spec.Len %d must be in [1, %d]", s.Len, MaxShardLen)
	}
	if _, err := clock.ParsePolicy(s.Policy); err != nil {
		return fmt.Errorf("shard: Spec.Policy: %w", err)
	}
	if _, err := s.GatePolicy(); err != nil {
		return fmt.Errorf("shard: Spec.Pipeline with Spec.Policy %q: %w", s.Policy, err)
	}
	if !s.Precision.Valid() {
		return fmt.Errorf("shard: Spec.Precision %d unknown (known: %s)", s.Precision, knownPrecisions)
	}
	if f := s.OutlierFactor; f != 0 && !(f >= MinOutlierFactor && f <= MaxOutlierFactor) {
		return fmt.Errorf("shard: Spec.OutlierFactor %g must be 0 (the default, %g) or in [%g, %g]", f, float64(DefaultOutlierFactor), float64(MinOutlierFactor), float64(MaxOutlierFactor))
	}
	if s.Batch < 0 || s.Batch > MaxBatch {
		return fmt.Errorf("shard: Spec.Batch %d must be 0 (unnamed) or in [1, %d]", s.Batch, MaxBatch)
	}
	if s.BalanceBase < 0 || s.BalanceBase > MaxBatch {
		return fmt.Errorf("shard: Spec.BalanceBase %d must be 0 (off) or in [1, 65536]", s.BalanceBase)
	}
	if st := s.BalanceStep; st < 0 || (st > 0 && (s.BalanceBase == 0 || s.BalanceBase%st != 0 || s.BalanceBase/st < 2)) {
		return fmt.Errorf("shard: Spec.BalanceStep %d must be 0 (off) or divide Spec.BalanceBase %d at least twice", st, s.BalanceBase)
	}
	if err := s.Outer.Validate(); err != nil {
		return err
	}
	return s.Optimizer.Validate()
}

// MaxShardLen bounds one shard at 1 GiB of float32, half of bbolt's value
// limit for the log entry that carries a push of it.
const MaxShardLen = 1 << 28

// Weighted reports whether the shard weights each push's gradient by its
// samples / BalanceBase before summing: under the balance layer, with
// gradients or OuterMean's one-step changes, not with a round's
// pseudo-gradient under sgd or nesterov. Such a pseudo-gradient already
// grows with its round's steps (a worker given twice the samples takes
// twice the steps and moves about twice as far), so weighing it by its
// samples too would count a fast worker's progress twice; the outer rule's
// 1/N then averages the round's pseudo-gradients as they are. A one-step
// change is of one batch's mean gradient whatever the batch's size, so it
// is weighted as a gradient is: the round's mean is weighted by samples.
func (s Spec) Weighted() bool {
	return s.BalanceBase > 0 && (!s.Outer.On() || s.Outer.Kind == OuterMean)
}
