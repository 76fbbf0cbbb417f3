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
	case !finite(o.Schedule.LR) || o.Schedule.LR <= 0:
		return fmt.Errorf("shard: Schedule.LR %g must be positive", o.Schedule.LR)
	case !finite(o.Schedule.Gamma) || o.Schedule.Gamma <= 0 || o.Schedule.Gamma > 1:
		return fmt.Errorf("shard: Schedule.Gamma %g must be in (0, 1]", o.Schedule.Gamma)
	case o.Schedule.StepSamples < 0:
		return fmt.Errorf("shard: Schedule.StepSamples %d must not be negative", o.Schedule.StepSamples)
	}
	return nil
}

// Rate is the learning rate after samples global samples.
func (s Schedule) Rate(samples int64) float64 {
	if s.StepSamples == 0 || s.Gamma == 1 {
		return s.LR
	}
	return s.LR * math.Pow(s.Gamma, float64(samples/s.StepSamples))
}

// Spec describes a shard; it is fixed by the Init entry.
type Spec struct {
	Shard     uint32    `msgpack:"shard"`
	Len       int       `msgpack:"len"`    // float32 parameters in the slice
	Policy    string    `msgpack:"policy"` // clock.ParsePolicy text, e.g. "dssp:3:12"
	Optimizer Optimizer `msgpack:"opt"`
	// OutlierFactor > 0 makes the leader refuse a push whose gradient norm
	// exceeds OutlierFactor × the median norm of the shard's recent pushes
	// (a flaky accelerator); 0 turns the check off.
	OutlierFactor float64 `msgpack:"of,omitempty"`
	// BalanceBase > 0 turns on the balance layer (docs/design.md#balance):
	// each push's gradient is weighted by its samples / BalanceBase (the
	// job's per-worker batch), and shard 0 sizes every worker's batch.
	BalanceBase int64 `msgpack:"bb,omitempty"`
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
const (
	MinOutlierFactor = 2
	MaxOutlierFactor = 1e6
)

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
		return fmt.Errorf("shard: Spec.OutlierFactor %g must be 0 (off) or in [%g, %g]", f, float64(MinOutlierFactor), float64(MaxOutlierFactor))
	}
	if s.BalanceBase < 0 || s.BalanceBase > 1<<16 {
		return fmt.Errorf("shard: Spec.BalanceBase %d must be 0 (off) or in [1, 65536]", s.BalanceBase)
	}
	return s.Optimizer.Validate()
}

// MaxShardLen bounds one shard at 1 GiB of float32, half of bbolt's value
// limit for the log entry that carries a push of it.
const MaxShardLen = 1 << 28
