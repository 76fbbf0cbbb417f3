package job

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"dsspmesh/clock"
	"dsspmesh/cudaops"
	"dsspmesh/shardapi"
)

// Spec is the training job of one mesh. The bootstrap node sets it;
// every joiner adopts it; it is persisted in each node's data directory so a
// restarted node checks it is rejoining the same job.
type Spec struct {
	Model   string `json:"model"`
	Dataset string `json:"dataset"`

	// Paradigm is bsp, asp, ssp, dssp or dssp-paper; SLower is s (ssp) or
	// s_L (dssp, dssp-paper) and RMax is r_max (dssp, dssp-paper).
	Paradigm string `json:"paradigm"`
	SLower   int64  `json:"s_lower"`
	RMax     int64  `json:"r_max"`

	// Optimizer is sgd (Momentum must be 0) or momentum.
	Optimizer string  `json:"optimizer"`
	LR        float64 `json:"lr"`
	Momentum  float64 `json:"momentum"`
	// The learning rate is LR·LRDecay^⌊samples/LRDecaySamples⌋ (constant
	// when LRDecaySamples is 0), where
	// samples counts every sample behind every applied push of the whole
	// mesh, so the schedule is the same whatever the paradigm or the number
	// of workers.
	LRDecay        float64 `json:"lr_decay"`
	LRDecaySamples int64   `json:"lr_decay_samples"`

	BatchSize int `json:"batch_size"`
	// Shards is the job's parameter shards; 0, the default, is one per
	// AutoShardBytes of fp32 parameters (WithShards), resolved when the
	// mesh's first node writes the spec, so a persisted or served spec
	// always names its count.
	Shards      int    `json:"shards"`
	Replication int    `json:"replication"`
	Seed        uint64 `json:"seed"`
	// OutlierFactor > 0 makes each shard's leader refuse a gradient whose
	// norm exceeds this factor times the median of its recent pushes (see
	// shardapi.Spec.OutlierFactor); 0 = the shards' default
	// (shardapi.DefaultOutlierFactor); the check cannot be turned off.
	OutlierFactor float64 `json:"outlier_factor,omitempty"`
	// Balance turns on the balance layer (docs/design.md#balance): shard 0
	// sizes each worker's batch to its measured speed, the global batch
	// stays BatchSize × the most workers present at once, every shard
	// weights a push by its samples / BatchSize, and the workers read one
	// job-wide data order (cudaops.Order).
	Balance bool `json:"balance,omitempty"`
	// Pipeline makes every worker compute iteration t+1 while its push of
	// t is in flight, and the gate release one iteration earlier to pay
	// for it (clock.Policy.Pipelined: s_L − 1), so that the slices an
	// iteration computes on keep the paradigm's bound but lack the
	// worker's own last update (docs/design.md, "The read guarantee").
	// Only ssp and dssp with s_L ≥ 1. Off in a spec persisted before it.
	Pipeline bool `json:"pipeline,omitempty"`
	// PipelineFresh is, under Pipeline, the share of each batch a worker
	// computes after the push in flight returns, on the parameters it
	// brought; the rest is computed while the push is in flight, on the
	// parameters before it. 0 (a spec persisted before it) computes the
	// whole batch ahead. A fresh half costs none of the samples a whole
	// batch ahead costs (1.36× to 95 % in simulation; docs/design.md),
	// while up to half a batch's compute of the push's round trip stays
	// hidden behind the part computed ahead.
	PipelineFresh float64 `json:"pipeline_fresh,omitempty"`

	// InitFrom is a safetensors file (dssp export, a checkpoint, dssp
	// train --out) whose parameters the bootstrap node proposes as the
	// shards' Init instead of θ from Seed; its tensors must match Model's.
	// Only the bootstrap node reads it.
	InitFrom string `json:"init_from,omitempty"`

	// WirePrecision is how gradients and parameter slices travel on the
	// wire and sit in the Raft log: fp32, bf16 (half the bytes, rounded to
	// nearest even) or int8 (gradients in blocks of 256 bytes and a scale,
	// with error feedback; parameters and leaders' sums in bf16); the
	// shards keep fp32 master weights. Empty, in a spec persisted by an
	// older build, means fp32.
	WirePrecision string `json:"wire_precision,omitempty"`

	// RoundFlags are the local rounds' (rounds.go; docs/design.md,
	// "Local rounds"), their JSON fields at the spec's top level.
	RoundFlags

	// Combine is how the shards combine the workers' pushes of one step
	// (--local-steps 1; docs/design.md, "The combine rule"): CombineMean,
	// each worker steps its own optimizer (an external trainer's, or
	// Optimizer at LR and Momentum for the built-in models) and the shards
	// apply the mean of the steps' changes weighted by samples, DDP's step
	// on equal workers in lock step; CombineSum, the workers push
	// gradients and every shard steps Optimizer on their sum, each push a
	// step of its own. Empty, in a spec persisted before the field, is
	// CombineSum: a mesh started by an earlier build trains on as it did.
	Combine string `json:"combine,omitempty"`

	// Layout is, for Model "external" (ExternalModel), the parameter layout
	// of the trainers' model in FormatLayout's text form: fixed on the
	// bootstrap node by its first trainer or by InitFrom's tensors, then
	// adopted by every joiner; a trainer presenting another is refused.
	// Empty for a built-in model, and on the bootstrap node until the
	// layout is known (a spec served or persisted always has it).
	Layout string `json:"layout,omitempty"`
}

// DefaultPipelineFresh is Spec.PipelineFresh's default: half of each
// batch on the fresh parameters.
const DefaultPipelineFresh = 0.5

// DefaultSpec is the MLP on MNIST under bounded DSSP(3, 12), int8
// gradients with error feedback on the wire, and the combine rule mean
// with the settings a DDP user picks for this model: SGD at 0.05 with
// momentum 0.9, batch 64 a worker (each worker steps its own optimizer;
// the shards apply the mean change: docs/design.md, "The combine rule").
// `dssp up --nodes 4` reaches 97 % in about a minute on a 2-core box
// (BENCHMARKS.md); momentum 0.5, the default of the combine rule sum
// (where every push was a step of its own), needed more than 150 s.
func DefaultSpec() Spec {
	return Spec{
		Model: "mlp", Dataset: "mnist",
		Paradigm: "dssp", SLower: 3, RMax: 12,
		Optimizer: "momentum", LR: 0.05, Momentum: 0.9,
		LRDecay: 0.85, LRDecaySamples: 60000,
		BatchSize: 64, Shards: 0, Replication: 3, Seed: 1,
		WirePrecision: "int8", PipelineFresh: DefaultPipelineFresh, RoundFlags: RoundFlags{LocalSteps: 1},
		Combine: CombineMean,
	}
}

// The combine rules (Spec.Combine).
const (
	CombineMean = "mean"
	CombineSum  = "sum"
)

// CombineRule is Combine with the empty value of an earlier build's spec
// read as CombineSum.
func (s Spec) CombineRule() string {
	if s.Combine == "" {
		return CombineSum
	}
	return s.Combine
}

// Outer is the shards' rule for the pushes: the outer optimizer of a job
// of local rounds, shardapi.OuterMean for one step a push under
// CombineMean, and none (Optimizer on gradients) under CombineSum. The
// outer rule of an external job's rounds is sgd at 1 unless named — the
// average of the workers' models, so that the trainers' own optimizer
// (momentum and all) is the only one that acts: DiLoCo's outer Nesterov on
// top of an inner momentum SGD at 0.9 diverged on the MNIST MLP at H = 4
// (BENCHMARKS.md); the built-in workers' inner sgd keeps no momentum and
// takes the Nesterov default.
func (s Spec) Outer() shardapi.Outer {
	if !s.Rounds() && s.CombineRule() == CombineMean {
		return shardapi.Outer{Kind: shardapi.OuterMean, LR: 1}
	}
	if s.Rounds() && s.External() && s.OuterOptimizer == "" && s.OuterMomentum == 0 {
		f := s.RoundFlags
		f.OuterOptimizer = "sgd"
		return f.Outer()
	}
	return s.RoundFlags.Outer()
}

// Deltas reports whether the workers push the change their own optimizer
// made (a round's pseudo-gradient, or one step's under CombineMean)
// rather than a gradient.
func (s Spec) Deltas() bool { return s.Outer().On() }

// Precision is the shards' wire precision (fp32 when unset).
func (s Spec) Precision() shardapi.Precision {
	p, _ := shardapi.ParsePrecision(s.wirePrecision())
	return p
}

func (s Spec) wirePrecision() string {
	if s.WirePrecision == "" {
		return "fp32"
	}
	return s.WirePrecision
}

// PolicyText is the paradigm in clock.ParsePolicy's text form (an
// unknown paradigm's name as it is).
func (s Spec) PolicyText() string {
	p, err := clock.ParseParadigm(s.Paradigm)
	if err != nil {
		return s.Paradigm
	}
	return clock.Policy{Paradigm: p, SL: s.SLower, RMax: s.RMax}.String()
}

// Policy is the gate policy of every shard.
func (s Spec) Policy() (clock.Policy, error) {
	p, err := clock.ParsePolicy(s.PolicyText())
	if err != nil {
		return clock.Policy{}, fmt.Errorf("--paradigm %q: %w", s.Paradigm, err)
	}
	return p, nil
}

// BalanceBase is shardapi.Spec.BalanceBase: under --balance a round's
// samples at the job's batch (the batch size × the local steps), else 0.
func (s Spec) BalanceBase() int64 {
	if s.Balance {
		return s.RoundSamples()
	}
	return 0
}

// BalanceStep is shardapi.Spec.BalanceStep: under --balance with
// --local-steps auto the batch of one local step (shard 0 sizes the
// round, BalanceBase its bound), else 0.
func (s Spec) BalanceStep() int64 {
	if s.Balance && s.LocalStepsAuto {
		return int64(s.BatchSize)
	}
	return 0
}

// Inner is the workers' inner optimizer of a job of local rounds with its
// defaults filled in (sgd at InnerSGDLRFactor × LR unless named); unused
// without local rounds.
func (s Spec) Inner() Inner { return s.RoundFlags.inner(s.LR) }

// RoundSamples is the samples of one worker's round at the job's batch:
// --batch × --local-steps (the batch without local rounds). The shards
// bound a push's samples by it and weigh by it under --balance.
func (s Spec) RoundSamples() int64 { return int64(s.BatchSize) * int64(s.Steps()) }

// ShardOptimizer is the update rule every shard applies to its range.
func (s Spec) ShardOptimizer() shardapi.Optimizer {
	o := shardapi.Optimizer{Kind: shardapi.Momentum, Momentum: s.Momentum,
		Schedule: shardapi.Schedule{LR: s.LR, Gamma: s.LRDecay, StepSamples: s.LRDecaySamples}}
	if s.Optimizer == "sgd" {
		o.Kind = shardapi.SGD
	}
	return o
}

// Validate names the first bad value.
func (s Spec) Validate() error {
	if err := s.RoundFlags.validate(s.BatchSize, s.Balance); err != nil {
		return err
	}
	switch s.Combine {
	case "", CombineMean, CombineSum:
	default:
		return fmt.Errorf("--combine %q unknown (known: %s, %s)", s.Combine, CombineMean, CombineSum)
	}
	if s.External() {
		if err := checkExternal(s); err != nil {
			return err
		}
	} else if !slices.Contains(cudaops.ModelNames(), s.Model) {
		return fmt.Errorf("--model %q unknown (known: %s, %s)", s.Model, strings.Join(cudaops.ModelNames(), ", "), ExternalModel)
	} else if s.Layout != "" {
		return fmt.Errorf("job spec: a layout is for --model %s only (model %s)", ExternalModel, s.Model)
	}
	if !s.External() && !slices.Contains(cudaops.DatasetNames(), s.Dataset) {
		return fmt.Errorf("--dataset %q unknown (known: %s)", s.Dataset, strings.Join(cudaops.DatasetNames(), ", "))
	}
	if _, err := clock.ParseParadigm(s.Paradigm); err != nil {
		return fmt.Errorf("--paradigm %q unknown (known: %s)", s.Paradigm, strings.Join(clock.ParadigmNames(), ", "))
	}
	if p, err := s.Policy(); err != nil {
		return err
	} else if _, err := p.Pipelined(); s.Pipeline && err != nil {
		return fmt.Errorf("--pipeline needs --paradigm ssp or dssp with --s-lower >= 1 (got %s): the gate releases at s_L−1 to keep the bound", s.PolicyText())
	}
	switch s.Optimizer {
	case "sgd":
		if s.Momentum != 0 {
			return fmt.Errorf("--momentum %g needs --optimizer momentum", s.Momentum)
		}
	case "momentum":
	default:
		return fmt.Errorf("--optimizer %q unknown (known: sgd, momentum)", s.Optimizer)
	}
	if _, err := shardapi.ParsePrecision(s.wirePrecision()); err != nil {
		return fmt.Errorf("--wire-precision %q unknown (known: fp32, bf16, int8, int4)", s.WirePrecision)
	}
	for _, err := range []error{
		CheckFloat("lr", s.LR, 0, MaxLR, true),
		CheckFloat("lr-decay", s.LRDecay, 0, 1, true),
		checkOutlierFactor(s.OutlierFactor),
		checkPipelineFresh(s.PipelineFresh),
		CheckMomentum(s.Momentum),
	} {
		if err != nil {
			return err
		}
	}
	switch {
	case s.LRDecaySamples < 0:
		return fmt.Errorf("--lr-decay-samples %d must be >= 0 (0: constant rate)", s.LRDecaySamples)
	case s.BatchSize <= 0 || s.BatchSize > 1<<16:
		return fmt.Errorf("--batch %d: must be in [1, 65536]", s.BatchSize)
	case s.Shards < 0 || s.Shards > maxShards:
		return fmt.Errorf("--shards %d outside 0..%d (0: one per %d MiB of parameters)", s.Shards, maxShards, AutoShardBytes>>20)
	case s.Replication <= 0 || s.Replication > 7:
		return fmt.Errorf("--replication %d outside 1..7", s.Replication)
	}
	return checkReplication(s.Replication)
}

// checkReplication refuses an even replication. A Raft group of r voters
// commits and elects with a majority, ⌊r/2⌋+1, so it survives (r−1)/2
// failures: an even group survives no more than the odd one below it,
// and a group of 2 survives none (one kill freezes the shard) while
// looking replicated. 1 is accepted: it is no replication by name
// (ReplicationWarning).
func checkReplication(r int) error {
	switch {
	case r == 2:
		return fmt.Errorf("--replication 2 is even: a shard's 2 voters need both for a quorum, so one kill freezes the shard " +
			"(it survives no failure, like 1); use 3 to survive one failure, or 1 to run without replication")
	case r%2 == 0:
		return fmt.Errorf("--replication %d is even: a shard's %d voters need %d for a quorum, so it survives %d failure(s), "+
			"no more than %d voters do; use %d or %d", r, r, r/2+1, (r-1)/2, r-1, r-1, r+1)
	}
	return nil
}

// ReplicationWarning is what a node logs at WARN when it starts a job
// whose replication survives no failure (--replication 1), else "".
func (s Spec) ReplicationWarning() string {
	if s.Replication != 1 {
		return ""
	}
	return "--replication 1: every shard has one voter, so a node's failure stops the shards it hosts " +
		"and their state lives on that node only; use 3 to survive one failure"
}

// checkExternal checks an external job's layout (when known) and its
// dataset, which only names the data for the trainers: a short token.
func checkExternal(s Spec) error {
	if s.Layout != "" {
		if _, err := ParseLayout(s.Layout); err != nil {
			return fmt.Errorf("job spec: %w", err)
		}
	}
	if s.Dataset == "" || len(s.Dataset) > 64 || strings.ContainsFunc(s.Dataset, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return fmt.Errorf("--dataset %q: for --model %s a name of 1 to 64 characters without spaces", s.Dataset, ExternalModel)
	}
	if s.Rounds() && s.Pipeline {
		return fmt.Errorf("--pipeline with --local-steps %d: for --model %s a trainer takes a round whole (its inner steps are its own), so a round cannot be split around the push in flight", s.Steps(), ExternalModel)
	}
	if s.Deltas() && s.Pipeline && s.PipelineFresh > 0 {
		return fmt.Errorf("--pipeline-fresh %g with --model %s: a trainer's step is its optimizer's, taken whole, so a batch cannot be split around the push in flight; use --pipeline-fresh 0 (the whole step computed while the push is in flight)", s.PipelineFresh, ExternalModel)
	}
	return nil
}

func checkPipelineFresh(f float64) error {
	if math.IsNaN(f) || f < 0 || f >= 1 {
		return fmt.Errorf("--pipeline-fresh %v: must be in [0, 1) (0: the whole batch computed while the push is in flight)", f)
	}
	return nil
}

func checkOutlierFactor(f float64) error {
	if f == 0 {
		return nil
	}
	if err := CheckFloat("outlier-factor", f, shardapi.MinOutlierFactor, shardapi.MaxOutlierFactor, false); err != nil {
		return fmt.Errorf("%w, or 0 (the default, 100)", err)
	}
	return nil
}

// specFlags ties each spec flag to its field, for binding and for telling
// a joiner which of its flags disagree with the mesh.
var specFlags = []struct {
	name  string
	value func(*Spec) string
}{
	{"model", func(s *Spec) string { return s.Model }},
	{"dataset", func(s *Spec) string { return s.Dataset }},
	{"paradigm", func(s *Spec) string { return s.Paradigm }},
	{"s-lower", func(s *Spec) string { return strconv.FormatInt(s.SLower, 10) }},
	{"r-max", func(s *Spec) string { return strconv.FormatInt(s.RMax, 10) }},
	{"optimizer", func(s *Spec) string { return s.Optimizer }},
	{"lr", func(s *Spec) string { return strconv.FormatFloat(s.LR, 'g', -1, 64) }},
	{"momentum", func(s *Spec) string { return strconv.FormatFloat(s.Momentum, 'g', -1, 64) }},
	{"lr-decay", func(s *Spec) string { return strconv.FormatFloat(s.LRDecay, 'g', -1, 64) }},
	{"lr-decay-samples", func(s *Spec) string { return strconv.FormatInt(s.LRDecaySamples, 10) }},
	{"batch", func(s *Spec) string { return strconv.Itoa(s.BatchSize) }},
	{"shards", func(s *Spec) string { return strconv.Itoa(s.Shards) }},
	{"replication", func(s *Spec) string { return strconv.Itoa(s.Replication) }},
	{"seed", func(s *Spec) string { return strconv.FormatUint(s.Seed, 10) }},
	{"outlier-factor", func(s *Spec) string { return strconv.FormatFloat(s.OutlierFactor, 'g', -1, 64) }},
	{"balance", func(s *Spec) string { return strconv.FormatBool(s.Balance) }},
	{"pipeline", func(s *Spec) string { return strconv.FormatBool(s.Pipeline) }},
	{"pipeline-fresh", func(s *Spec) string { return strconv.FormatFloat(s.PipelineFresh, 'g', -1, 64) }},
	{"init-from", func(s *Spec) string { return s.InitFrom }},
	{"wire-precision", func(s *Spec) string { return s.wirePrecision() }},
	{"combine", func(s *Spec) string { return s.CombineRule() }},
	{"local-steps", func(s *Spec) string { return localStepsFlag{&s.RoundFlags}.String() }},
	{"outer-optimizer", func(s *Spec) string { return s.Outer().Kind.String() }},
	{"outer-lr", func(s *Spec) string { return strconv.FormatFloat(s.Outer().LR, 'g', -1, 64) }},
	{"outer-momentum", func(s *Spec) string { return strconv.FormatFloat(s.Outer().Momentum, 'g', -1, 64) }},
	{"inner-optimizer", func(s *Spec) string { return s.Inner().Kind }},
	{"inner-lr", func(s *Spec) string { return strconv.FormatFloat(s.Inner().LR, 'g', -1, 64) }},
}

// BindFlags registers the spec's flags on fs with s's values as defaults.
func (s *Spec) BindFlags(fs *pflag.FlagSet) {
	fs.StringVar(&s.Model, "model", s.Model, "job: model, one of "+strings.Join(cudaops.ModelNames(), ", ")+", or external (a trainer process attached to the node's trainer socket computes; its layout becomes the job's)")
	fs.StringVar(&s.Dataset, "dataset", s.Dataset, "job: dataset, one of "+strings.Join(cudaops.DatasetNames(), ", ")+"; for --model external any name of the trainers' data (default "+ExternalDataset+")")
	fs.StringVar(&s.Paradigm, "paradigm", s.Paradigm, "job: synchronization paradigm: bsp, asp, ssp, dssp (bounded by s_L+r_max) or dssp-paper (the paper's unbounded reading)")
	fs.Int64Var(&s.SLower, "s-lower", s.SLower, "job: staleness s for ssp, lower bound s_L for dssp")
	fs.Int64Var(&s.RMax, "r-max", s.RMax, "job: extra range r_max for dssp (s_U = s_L + r_max)")
	fs.StringVar(&s.Optimizer, "optimizer", s.Optimizer, "job: sgd or momentum")
	fs.Float64Var(&s.LR, "lr", s.LR, "job: initial learning rate, in (0, 100]")
	fs.Float64Var(&s.Momentum, "momentum", s.Momentum, "job: momentum (optimizer momentum)")
	fs.Float64Var(&s.LRDecay, "lr-decay", s.LRDecay, "job: multiply the learning rate by this every --lr-decay-samples samples applied mesh-wide")
	fs.Int64Var(&s.LRDecaySamples, "lr-decay-samples", s.LRDecaySamples, "job: global samples between learning-rate decays")
	fs.IntVar(&s.BatchSize, "batch", s.BatchSize, "job: mini-batch size per worker")
	fs.IntVar(&s.Shards, "shards", s.Shards, fmt.Sprintf("job: parameter shards, each its own Raft group (0: one per %d MiB of fp32 parameters, at least one)", AutoShardBytes>>20))
	fs.IntVar(&s.Replication, "replication", s.Replication, "job: Raft voters per shard, odd: 3 survives one failure, 5 two, 1 none (even values are refused); fewer while the mesh is smaller")
	fs.Uint64Var(&s.Seed, "seed", s.Seed, "job: seed of parameter init and data order")
	fs.Float64Var(&s.OutlierFactor, "outlier-factor", s.OutlierFactor, "job: refuse a gradient whose norm exceeds this many times the shard's recent median (0 = the default, 100; else 2 to 1e6; the check cannot be turned off)")
	fs.BoolVar(&s.Balance, "balance", s.Balance, "job: size each worker's mini-batch to its measured speed (global batch fixed, gradients weighted by samples, one job-wide data order); composes with any --paradigm")
	fs.BoolVar(&s.Pipeline, "pipeline", s.Pipeline, "job: compute iteration t+1 while the push of t is in flight; the gate releases one iteration earlier (s_L−1) so reads keep the bound (ssp or dssp with --s-lower >= 1)")
	fs.Float64Var(&s.PipelineFresh, "pipeline-fresh", s.PipelineFresh, "job: under --pipeline, the share of each batch computed after the push in flight returns, on the parameters it brings; the rest is computed while it is in flight (0: the whole batch ahead)")
	fs.StringVar(&s.InitFrom, "init-from", s.InitFrom, "job: start from the parameters in this safetensors file (dssp export, a checkpoint, dssp train --out) instead of a random init; its tensors must match --model")
	s.RoundFlags.bindFlags(fs)
	fs.StringVar(&s.Combine, "combine", s.Combine, "job: how the shards combine one-step pushes: mean (each worker steps its own optimizer — a trainer's, or --optimizer at --lr — and the shards apply the mean change weighted by samples: DDP's step on equal workers) or sum (workers push gradients, every push a step of --optimizer on the shards, the rule of earlier builds)")
	fs.StringVar(&s.WirePrecision, "wire-precision", s.WirePrecision, "job: precision of gradients and parameter slices on the wire and in the Raft log: fp32, bf16 (half the bytes), int8 (gradients in a quarter of the bytes with error feedback, parameters in bf16) or int4 (gradients in 0.13 of the bytes, likewise); shards keep fp32 master weights")
}

// ConflictError says which explicitly set flags disagree with the job
// spec a joiner adopted from the mesh.
type ConflictError struct {
	Flags []string // "--model lenet (mesh: mlp)"
}

func (e *ConflictError) Error() string {
	return "flags disagree with the mesh's job spec: " + strings.Join(e.Flags, ", ") +
		"; drop them to adopt the mesh's job, or bootstrap a new mesh"
}

// CheckAdopt returns a *ConflictError if any flag for which explicit
// returns true sets a value of s (the local flags) different from mesh.
func (s Spec) CheckAdopt(mesh Spec, explicit func(flag string) bool) error {
	var bad []string
	for _, f := range specFlags {
		if !explicit(f.name) {
			continue
		}
		if f.name == "shards" && s.Shards == 0 {
			continue // auto: whatever the mesh resolved it to
		}
		if mine, theirs := f.value(&s), f.value(&mesh); mine != theirs {
			bad = append(bad, fmt.Sprintf("--%s %s (mesh: %s)", f.name, mine, theirs))
		}
	}
	if bad != nil {
		return &ConflictError{Flags: bad}
	}
	return nil
}

// AutoShardBytes is the fp32 parameter bytes per shard that --shards 0
// aims at. Every shard costs, per push, a Raft entry with an fsync on each
// replica and its own messages, whatever its slice's size, so a small
// model is cheapest whole (the 0.94 MB MLP moves ~1.3× the samples/s as
// one shard as it does as four, BENCHMARKS.md); a large one
// spreads its pushes, applies and snapshots over several leaders.
const AutoShardBytes = 16 << 20

const maxShards = 1024

// WithShards returns s with Shards resolved for a model of numParams
// parameters: as set, or with 0 one shard per AutoShardBytes of fp32
// parameters, rounded up, at least 1.
func (s Spec) WithShards(numParams int) Spec {
	if s.Shards == 0 {
		s.Shards = min(max(1, (4*numParams+AutoShardBytes-1)/AutoShardBytes), maxShards)
	}
	return s
}

// ResolveShards is WithShards for s's model, which it builds (without
// parameters) to count them.
func ResolveShards(s Spec) (Spec, error) {
	if s.Shards != 0 {
		return s, nil
	}
	if s.External() {
		l, err := s.ParsedLayout()
		if err != nil || l == nil {
			return s, fmt.Errorf("--shards 0 needs the model's size: the %s layout is not known yet (%v)", ExternalModel, err)
		}
		return s.WithShards(l.Total()), nil
	}
	m, err := cudaops.NewModel(s.Model, cudaops.ModelOptions{Workers: 1})
	if err != nil {
		return s, fmt.Errorf("--shards 0 needs the model's size: %w", err)
	}
	return s.WithShards(m.NumParams()), nil
}

// Marshal and Unmarshal are the spec's persisted and wire form.
func Marshal(s Spec) ([]byte, error) { return json.MarshalIndent(s, "", "  ") }

// Unmarshal decodes and validates a spec from disk or a peer.
func Unmarshal(b []byte) (Spec, error) {
	var s Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return Spec{}, fmt.Errorf("job spec: %w", err)
	}
	if err := s.Validate(); err != nil {
		return Spec{}, fmt.Errorf("job spec: %w", err)
	}
	return s, nil
}

// ParsedLayout is the spec's parameter layout: an external job's (Layout
// parsed); nil for a built-in model (its layout is the model's) and for
// an external job whose first trainer has not attached yet.
func (s Spec) ParsedLayout() (cudaops.Layout, error) {
	if s.Layout == "" {
		return nil, nil
	}
	return ParseLayout(s.Layout)
}

// External reports whether the job's model lives in an external trainer.
func (s Spec) External() bool { return s.Model == ExternalModel }

// ExternalDataset is the dataset of a --model external job whose
// bootstrap node was given no --dataset: the trainers read data of their
// own that the mesh cannot name (the built-in default, mnist, would be a
// guess).
const ExternalDataset = "external"

// WithJobDataset is the spec a bootstrap node starts a new job with: an
// external job whose --dataset was not set explicitly names its dataset
// ExternalDataset, which is what the trainers' welcome and an exported
// model's metadata then say; any other spec is s.
func (s Spec) WithJobDataset(explicit func(flag string) bool) Spec {
	if s.External() && !explicit("dataset") {
		s.Dataset = ExternalDataset
	}
	return s
}
