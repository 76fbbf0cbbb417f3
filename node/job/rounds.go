package job

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"dsspmesh/shardapi"
)

// Local rounds' defaults and bounds (RoundFlags). The outer defaults are
// DiLoCo's (arXiv 2311.08105); outer sgd at 1 makes a synchronous round
// the average of the workers' models (local SGD). Inner sgd defaults to
// InnerSGDLRFactor × the job's --lr, so that it follows a model's rate
// (0.3 at the default 0.05; 0.06 for the 100 MB model's 0.01): MNIST's
// MLP, 4 workers in synchronous rounds under the default outer rule,
// reached 97% of a 2 000-sample test subset after 385k/238k/197k samples
// at inner rates 0.1/0.2/0.3 with H = 16, 328k/262k at 0.2/0.3 with H =
// 64 and 213k at 0.3 with H = 4, where per-step momentum SGD at the job's
// default (0.05, momentum 0.5, no decay) needed 360k (docs/design.md,
// "Local rounds").
const (
	MaxLocalSteps          = 1 << 14
	DefaultAutoSteps       = 64 // --local-steps auto's bound
	DefaultOuterNesterovLR = 0.7
	DefaultOuterMomentum   = 0.9
	DefaultOuterSGDLR      = 1.0
	InnerSGDLRFactor       = 6
	DefaultInnerAdamLR     = 0.001
	defaultInnerOptimizer  = "sgd"
)

// RoundFlags are a job's local rounds. LocalSteps is H: each worker takes
// H steps of its inner optimizer (InnerOptimizer at InnerLR; an external
// trainer's own optimizer) from the parameters its gate allows and pushes
// the round's pseudo-gradient θ_start − θ_local, once, as one push (one
// clock tick); the shards apply it by the outer optimizer
// (OuterOptimizer at OuterLR, OuterMomentum: shardapi.Outer). 0 (a spec
// persisted before local rounds) is 1. With H = 1 (the outer and inner
// fields then unset) the job is as it was: the workers push gradients and
// the shards step Optimizer on them. Every zero below is its default
// (Outer, Inner).
type RoundFlags struct {
	LocalSteps int `json:"local_steps,omitempty"`
	// LocalStepsAuto (--local-steps auto or auto:N): each worker chooses
	// its rounds' steps from the link, at most LocalSteps (N, default
	// DefaultAutoSteps; node/worker's autosteps.go).
	LocalStepsAuto bool    `json:"local_steps_auto,omitempty"`
	OuterOptimizer string  `json:"outer_optimizer,omitempty"`
	OuterLR        float64 `json:"outer_lr,omitempty"`
	OuterMomentum  float64 `json:"outer_momentum,omitempty"`
	InnerOptimizer string  `json:"inner_optimizer,omitempty"`
	InnerLR        float64 `json:"inner_lr,omitempty"`
}

// Inner is a worker's inner optimizer of a job of local rounds.
type Inner struct {
	Kind string  // sgd or adam
	LR   float64 // its constant rate
}

// Steps is H, the local steps of a round (1 without local rounds).
func (s RoundFlags) Steps() int { return max(s.LocalSteps, 1) }

// Rounds reports whether the job runs local rounds: H > 1. A round of
// one step would be a gradient step by another name (and a push of one
// step carries a gradient by worker.Compute's contract), so the outer
// flags need H > 1.
func (s RoundFlags) Rounds() bool { return s.Steps() > 1 }

// Outer is the shards' outer optimizer with its defaults filled in; the
// zero Outer (none: Optimizer on gradients) without local rounds.
func (s RoundFlags) Outer() shardapi.Outer {
	if !s.Rounds() {
		return shardapi.Outer{}
	}
	o := shardapi.Outer{Kind: shardapi.OuterNesterov, LR: DefaultOuterNesterovLR, Momentum: DefaultOuterMomentum}
	if s.OuterOptimizer == "sgd" {
		o = shardapi.Outer{Kind: shardapi.OuterSGD, LR: DefaultOuterSGDLR}
	}
	if s.OuterLR != 0 {
		o.LR = s.OuterLR
	}
	if s.OuterMomentum != 0 {
		o.Momentum = s.OuterMomentum
	}
	return o
}

// inner is the workers' inner optimizer with its defaults filled in for a
// job of rate jobLR (sgd at InnerSGDLRFactor × jobLR unless named).
func (s RoundFlags) inner(jobLR float64) Inner {
	in := Inner{Kind: s.InnerOptimizer, LR: s.InnerLR}
	if in.Kind == "" {
		in.Kind = defaultInnerOptimizer
	}
	switch {
	case in.LR != 0:
	case in.Kind == "adam":
		in.LR = DefaultInnerAdamLR
	default:
		// Rounded to 12 digits: 6 × 0.05 is 0.30000000000000004 in
		// float64, and a joiner's explicit --inner-lr 0.3 must agree.
		in.LR, _ = strconv.ParseFloat(strconv.FormatFloat(min(InnerSGDLRFactor*jobLR, MaxLR), 'g', 12, 64), 64)
	}
	return in
}

// validate names the first bad value of the local-round flags in a job
// of batch samples a step, balanced or not.
func (s RoundFlags) validate(batch int, balance bool) error {
	round := int64(batch) * int64(s.Steps())
	switch {
	case s.LocalSteps < 0 || s.LocalSteps > MaxLocalSteps:
		return fmt.Errorf("--local-steps %d outside 1..%d", s.LocalSteps, MaxLocalSteps)
	case s.LocalStepsAuto && s.LocalSteps < 2:
		return fmt.Errorf("--local-steps auto:%d: the bound must be at least 2", s.LocalSteps)
	case batch > 0 && round > shardapi.MaxBatch:
		return fmt.Errorf("--local-steps %d × --batch %d = %d samples a round, above %d", s.Steps(), batch, round, shardapi.MaxBatch)
	case balance && s.LocalStepsAuto && batch > 0 && int64(batch)*2 < minBalancedRound:
		return fmt.Errorf("--balance with --local-steps auto and --batch %d: a round may be 2 steps, %d samples; at least %d (a balanced share, at least an eighth of a round, must hold 2 steps)",
			batch, 2*batch, minBalancedRound)
	case balance && s.Rounds() && batch > 0 && round < minBalancedRound:
		return fmt.Errorf("--balance with --local-steps %d × --batch %d = %d samples a round: at least %d (a balanced share, at least an eighth of a round, must hold 2 steps)",
			s.Steps(), batch, round, minBalancedRound)
	}
	switch s.OuterOptimizer {
	case "", "sgd", "nesterov":
	default:
		return fmt.Errorf("--outer-optimizer %q unknown (known: sgd, nesterov)", s.OuterOptimizer)
	}
	switch s.InnerOptimizer {
	case "", "sgd", "adam":
	default:
		return fmt.Errorf("--inner-optimizer %q unknown (known: sgd, adam)", s.InnerOptimizer)
	}
	if !s.Rounds() {
		for _, f := range []struct {
			name string
			set  bool
			v    any
		}{{"outer-optimizer", s.OuterOptimizer != "", s.OuterOptimizer}, {"outer-lr", s.OuterLR != 0, s.OuterLR}, {"outer-momentum", s.OuterMomentum != 0, s.OuterMomentum},
			{"inner-optimizer", s.InnerOptimizer != "", s.InnerOptimizer}, {"inner-lr", s.InnerLR != 0, s.InnerLR}} {
			if f.set {
				return fmt.Errorf("--%s %v needs local rounds: --local-steps above 1", f.name, f.v)
			}
		}
		return nil
	}
	if s.OuterLR != 0 {
		if err := CheckFloat("outer-lr", s.OuterLR, 0, shardapi.MaxOuterLR, true); err != nil {
			return err
		}
	}
	if s.OuterMomentum != 0 {
		if s.OuterOptimizer == "sgd" {
			return fmt.Errorf("--outer-momentum %g needs --outer-optimizer nesterov", s.OuterMomentum)
		}
		if err := CheckMomentum(s.OuterMomentum); err != nil {
			return fmt.Errorf("--outer-momentum: %w", err)
		}
	}
	if s.InnerLR != 0 {
		if err := CheckFloat("inner-lr", s.InnerLR, 0, MaxLR, true); err != nil {
			return err
		}
	}
	return s.Outer().Validate()
}

// minBalancedRound is the fewest samples a round of a balanced job may
// have: the balancer gives no worker less than an eighth of a round
// (balance.DefaultConfig), which must be 2 samples for a round of at
// least 2 steps (a push of one step would carry a gradient).
const minBalancedRound = 16

// bindFlags registers the local-round flags on fs.
func (s *RoundFlags) bindFlags(fs *pflag.FlagSet) {
	fs.Var(localStepsFlag{s}, "local-steps", "job: local steps H a round: each worker takes H steps of its inner optimizer, then pushes the round's pseudo-gradient once (1: a gradient a push, as without local rounds); auto or auto:N: each worker's H from its measured push and step times, so a push is at most 10% of a round, at most N (64)")
	fs.StringVar(&s.OuterOptimizer, "outer-optimizer", s.OuterOptimizer, "job: the shards' rule on pseudo-gradients: nesterov (Delayed Nesterov, the default with --local-steps > 1) or sgd (lr 1: the models' average)")
	fs.Float64Var(&s.OuterLR, "outer-lr", s.OuterLR, "job: outer learning rate (0: 0.7 for nesterov, 1 for sgd)")
	fs.Float64Var(&s.OuterMomentum, "outer-momentum", s.OuterMomentum, "job: outer Nesterov momentum (0: 0.9; --outer-optimizer sgd for none)")
	fs.StringVar(&s.InnerOptimizer, "inner-optimizer", s.InnerOptimizer, "job: the built-in worker's optimizer within a round: sgd or adam (an external trainer's is its own)")
	fs.Float64Var(&s.InnerLR, "inner-lr", s.InnerLR, "job: inner learning rate (0: 6 × --lr for sgd, 0.3 at the default --lr; 0.001 for adam)")
}

// localStepsFlag is --local-steps: a number H, or auto[:N].
type localStepsFlag struct{ s *RoundFlags }

func (f localStepsFlag) String() string {
	if f.s == nil {
		return "1"
	}
	if f.s.LocalStepsAuto {
		return fmt.Sprintf("auto:%d", f.s.LocalSteps)
	}
	return strconv.Itoa(f.s.LocalSteps)
}

func (f localStepsFlag) Set(v string) error {
	if v == "auto" {
		f.s.LocalStepsAuto, f.s.LocalSteps = true, DefaultAutoSteps
		return nil
	}
	if n, ok := strings.CutPrefix(v, "auto:"); ok {
		k, err := strconv.Atoi(n)
		if err != nil {
			return fmt.Errorf("--local-steps %q: the bound after auto: is not a number", v)
		}
		f.s.LocalStepsAuto, f.s.LocalSteps = true, k
		return nil
	}
	k, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("--local-steps %q: a number of steps, auto or auto:N", v)
	}
	f.s.LocalStepsAuto, f.s.LocalSteps = false, k
	return nil
}

func (localStepsFlag) Type() string { return "H|auto[:N]" }
