package shardapi

import (
	"fmt"
	"math"
)

// OuterKind names the shards' rule for a job of local rounds
// (docs/design.md, "Local rounds"): what a push's gradient is taken to be
// and how it is applied.
type OuterKind uint8

const (
	// OuterNone is the rule of a job without local rounds: a push carries
	// a gradient, and Spec.Optimizer steps on the sum of an entry's
	// gradients. The zero value, so a spec written before local rounds
	// decodes to it.
	OuterNone OuterKind = iota
	// OuterSGD: a push carries a round's pseudo-gradient Δ = θ_start −
	// θ_local; each arrival moves θ by −LR·Δ/N (N: the workers in the
	// gate), so a synchronous round of N arrivals applies −LR·mean(Δ)
	// (LR 1: the average of the workers' models, local SGD).
	OuterSGD
	// OuterNesterov is Delayed Nesterov on pseudo-gradients: each arrival
	// moves θ by −LR·Δ/N and adds Δ to a buffer; once the arrivals since
	// the last momentum step reach N, the momentum takes the buffer's
	// mean (m ← μ·m + buffer/N) and θ moves by −LR·μ·m. A synchronous
	// round is then exactly Nesterov on the round's mean pseudo-gradient
	// (DiLoCo's outer step); under bounded staleness the momentum moves
	// once per N arrivals, not once per arrival.
	OuterNesterov
	// OuterMean is the rule of a job of one step a push under --combine
	// mean (docs/design.md, "The combine rule"): a push carries the
	// change one step of the worker's own optimizer made, Δ = θ_start −
	// θ_after, and each arrival moves θ by −w·Δ/N, w its samples ÷
	// BalanceBase under the balance layer (else 1). The N arrivals of a
	// synchronous round from one θ apply their mean weighted by samples:
	// the step DDP takes with the mean gradient, for SGD and momentum
	// SGD exactly (the mean of the workers' momentum buffers is the
	// momentum of the mean gradient). LR is 1 and Momentum 0; the shard
	// applies it as sgd at 1 (outer.go).
	OuterMean
)

func (k OuterKind) String() string {
	switch k {
	case OuterNone:
		return "none"
	case OuterSGD:
		return "sgd"
	case OuterNesterov:
		return "nesterov"
	case OuterMean:
		return "mean"
	}
	return fmt.Sprintf("outer(%d)", uint8(k))
}

// Outer is the outer optimizer of a job of local rounds; the zero value is
// none (Spec.Optimizer on gradients, the rule of a job without rounds).
// The outer rate is constant: the workers' inner optimizer carries the
// job's progress within a round.
type Outer struct {
	Kind     OuterKind `msgpack:"k"`
	LR       float64   `msgpack:"lr"`
	Momentum float64   `msgpack:"m"` // μ for OuterNesterov, 0 for OuterSGD
}

// IsZero reports whether o is OuterNone (msgpack's omitempty asks it, so
// a spec without local rounds encodes as it did before they existed).
func (o Outer) IsZero() bool { return o == Outer{} }

// On reports whether pushes carry pseudo-gradients under an outer rule.
func (o Outer) On() bool { return o.Kind != OuterNone }

// Nesterov reports whether the rule keeps a momentum and a buffer.
func (o Outer) Nesterov() bool { return o.Kind == OuterNesterov }

// MaxOuterLR bounds an outer learning rate: 1 applies the mean
// pseudo-gradient whole (the average of the models); DiLoCo uses 0.7.
const MaxOuterLR = 100

// Validate names the first bad value.
func (o Outer) Validate() error {
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case o.Kind == OuterNone:
		if o != (Outer{}) {
			return fmt.Errorf("shard: Outer.LR %g and Momentum %g set without an outer optimizer", o.LR, o.Momentum)
		}
	case o.Kind != OuterSGD && o.Kind != OuterNesterov && o.Kind != OuterMean:
		return fmt.Errorf("shard: Outer.Kind %d is not sgd, nesterov or mean", o.Kind)
	case o.Kind == OuterMean && (o.LR != 1 || o.Momentum != 0):
		return fmt.Errorf("shard: Outer mean with LR %g and Momentum %g: must be 1 and 0", o.LR, o.Momentum)
	case !finite(o.LR) || o.LR <= 0 || o.LR > MaxOuterLR:
		return fmt.Errorf("shard: Outer.LR %g must be in (0, %d]", o.LR, MaxOuterLR)
	case o.Kind == OuterSGD && o.Momentum != 0:
		return fmt.Errorf("shard: Outer.Momentum %g must be 0 for sgd", o.Momentum)
	case !finite(o.Momentum) || o.Momentum < 0 || float32(o.Momentum) >= 1:
		return fmt.Errorf("shard: Outer.Momentum %g must be in [0, 1) in float32", o.Momentum)
	}
	return nil
}
