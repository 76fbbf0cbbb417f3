package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"dsspmesh/clock"
	"dsspmesh/lab/netlab"
	"dsspmesh/node"
	"dsspmesh/node/job"
	"dsspmesh/node/launch"
)

// Variant is one paradigm with its parameters, in clock.ParsePolicy's text
// form: bsp, asp, ssp:S, dssp:SL:RMAX, dssp-paper:SL:RMAX; the suffixes
// "+balance" (job flag --balance) and "+pipeline" (--pipeline) add the
// balance layer and the pipelined loop: ssp:1+balance+pipeline; "+hN"
// (--local-steps N) makes every push a round of N local steps:
// dssp:3:12+h16.
type Variant string

// options are v's policy text and its suffixes, without the "+".
func (v Variant) options() (policy string, opts []string) {
	parts := strings.Split(string(v), "+")
	return parts[0], parts[1:]
}

// Balanced reports whether v runs with the balance layer.
func (v Variant) Balanced() bool { _, o := v.options(); return slices.Contains(o, "balance") }

// Pipelined reports whether v runs with --pipeline.
func (v Variant) Pipelined() bool { _, o := v.options(); return slices.Contains(o, "pipeline") }

// LocalSteps is v's --local-steps: N of a "+hN" suffix, else 1.
func (v Variant) LocalSteps() int {
	_, opts := v.options()
	for _, o := range opts {
		if n, ok := localStepsSuffix(o); ok {
			return n
		}
	}
	return 1
}

func localStepsSuffix(o string) (int, bool) {
	s, ok := strings.CutPrefix(o, "h")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}

// WithLocalSteps returns every variant of vs at each of hs local steps:
// v itself for 1, v+"+hN" for N > 1, in the order v₁h₁, v₁h₂, …
func WithLocalSteps(vs []Variant, hs []int) []Variant {
	if len(hs) == 0 {
		return vs
	}
	var out []Variant
	for _, v := range vs {
		for _, h := range hs {
			if h <= 1 {
				out = append(out, v)
			} else {
				out = append(out, Variant(fmt.Sprintf("%s+h%d", v, h)))
			}
		}
	}
	return out
}

// specArgs are the job flags that select this paradigm on the bootstrap
// node.
func (v Variant) specArgs() ([]string, error) {
	policy, opts := v.options()
	p, err := clock.ParsePolicy(policy)
	if err != nil {
		return nil, fmt.Errorf("--paradigms: %q: %w", v, err)
	}
	parts := strings.Split(policy, ":")
	args := []string{"--paradigm", parts[0]}
	for _, o := range opts {
		switch o {
		case "balance":
			args = append(args, "--balance=true")
		case "pipeline":
			if _, err := p.Pipelined(); err != nil {
				return nil, fmt.Errorf("--paradigms: %q: %w", v, err)
			}
			args = append(args, "--pipeline=true")
		default:
			n, ok := localStepsSuffix(o)
			if !ok || n < 1 {
				return nil, fmt.Errorf("--paradigms: %q: unknown suffix +%s (known: +balance, +pipeline, +hN: --local-steps N)", v, o)
			}
			args = append(args, "--local-steps", strconv.Itoa(n))
		}
	}
	switch p.Paradigm {
	case clock.SSP:
		args = append(args, "--s-lower", strconv.FormatInt(p.SL, 10))
	case clock.DSSP, clock.DSSPPaper:
		if len(parts) > 3 {
			return nil, fmt.Errorf("--paradigms: %q: the mesh's job spec has no objective option; use %s:SL:RMAX", v, parts[0])
		}
		args = append(args, "--s-lower", strconv.FormatInt(p.SL, 10), "--r-max", strconv.FormatInt(p.RMax, 10))
	}
	return args, nil
}

// Setting is one mesh configuration the variants are compared in.
type Setting struct {
	Name     string    // homogeneous, heterogeneous
	Slowdown []float64 // per-worker --slowdown, cycled; nil = all 1
	// Link, if set, runs the meshes on the link lab's topology (one host
	// a node); nil: on loopback.
	Link *netlab.Spec
	// Baseline, if set, names the setting this one is measured against:
	// it runs right after it for each variant, and the report sets their
	// figures side by side (LinkSettings).
	Baseline string
}

func (s Setting) String() string {
	var what []string
	if len(s.Slowdown) > 0 {
		what = append(what, "slowdown "+FormatFloats(s.Slowdown))
	}
	if s.Link != nil {
		what = append(what, s.Link.Describe())
	}
	if len(what) == 0 {
		return s.Name
	}
	return fmt.Sprintf("%s (%s)", s.Name, strings.Join(what, "; "))
}

// ParadigmsConfig is one `dssp-lab bench paradigms` run.
type ParadigmsConfig struct {
	Binary   string // the dssp binary the meshes run
	Workers  int    // node processes per mesh
	Variants []Variant
	Settings []Setting
	Repeats  int
	// Targets are the test accuracies whose time is reported; the run of
	// one mesh stops at the highest or at TimeLimit.
	Targets   []float64
	TimeLimit time.Duration
	// RefTarget is the target of the ratio columns (time of each variant
	// over that of dssp and dssp-paper); it must be one of Targets.
	RefTarget float64
	EvalEvery time.Duration // the evaluating node's cadence
	// EvalSamples is the test samples per evaluation (0: the whole set).
	// The evaluator is a training node, so evaluation slows its worker;
	// fewer samples make that straggler milder and the accuracy coarser.
	EvalSamples int
	Poll        time.Duration
	Threads     int // compute goroutines per node
	// ComputeDelay is every node's --compute-delay: the emulated
	// accelerator time of a speed-1 worker for the job's batch, which
	// --slowdown stretches and a balanced worker's batch scales.
	ComputeDelay time.Duration
	SpecArgs     []string // extra job flags for every mesh (e.g. --model lenet)
	// CeilingTime > 0 measures the machine's compute ceiling before the
	// meshes: one single-threaded worker in process with no network for
	// this long, × the cores (as `dssp-lab bench mesh`); each run's samples/s
	// is then also reported as a share of it. Only without ComputeDelay
	// (an emulated accelerator's ceiling is not the CPU's).
	CeilingTime time.Duration
	NodeArgs    []string // extra flags for every node process (e.g. --pprof)
	OutDir      string   // report.md, runs.csv, summary.csv, PNG plots, runs/
	Out         io.Writer
	Verbose     bool // forward each mesh's full progress view
}

// DefaultVariants are the paradigms of the paper's comparison.
func DefaultVariants() []Variant {
	return []Variant{"bsp", "asp", "ssp:3", "ssp:6", "ssp:15", "dssp:3:12", "dssp-paper:3:12"}
}

// DefaultParadigmsConfig is the full comparison: 4 workers, 7 variants,
// homogeneous and 1,1,2,4, 3 repeats, targets 95/97/98%, 10 minutes a mesh.
func DefaultParadigmsConfig() ParadigmsConfig {
	return ParadigmsConfig{
		Workers: 4, Variants: DefaultVariants(),
		Settings: []Setting{{Name: "homogeneous"}, {Name: "heterogeneous", Slowdown: []float64{1, 1, 2, 4}}},
		Repeats:  3, Targets: []float64{0.95, 0.97, 0.98}, TimeLimit: 10 * time.Minute, RefTarget: 0.97,
		EvalEvery: 2 * time.Second, Poll: time.Second, Threads: 1, OutDir: "bench-paradigms",
	}
}

// Validate names the first bad value.
func (c ParadigmsConfig) Validate() error {
	switch {
	case c.Binary == "":
		return errors.New("bench: no dssp binary to start")
	case c.Workers < 1 || c.Workers > 64:
		return fmt.Errorf("--workers %d outside 1..64", c.Workers)
	case len(c.Variants) == 0:
		return errors.New("--paradigms is empty")
	case len(c.Settings) == 0:
		return errors.New("bench: no setting to run")
	case c.Repeats < 1:
		return fmt.Errorf("--repeats %d must be >= 1", c.Repeats)
	case len(c.Targets) == 0:
		return errors.New("--targets is empty")
	case c.TimeLimit <= 0:
		return fmt.Errorf("--time-limit %v must be > 0", c.TimeLimit)
	case c.EvalEvery <= 0:
		return fmt.Errorf("--eval-every %v must be > 0", c.EvalEvery)
	case c.EvalSamples < 0:
		return fmt.Errorf("--eval-samples %d must be >= 0 (0: the whole test set)", c.EvalSamples)
	case c.Poll <= 0:
		return fmt.Errorf("--poll %v must be > 0", c.Poll)
	case c.Threads < 0:
		return fmt.Errorf("--threads %d must be >= 0", c.Threads)
	case c.ComputeDelay < 0 || c.ComputeDelay > node.MaxComputeDelay:
		return fmt.Errorf("--compute-delay %v outside [0, %v]", c.ComputeDelay, node.MaxComputeDelay)
	case c.OutDir == "":
		return errors.New("--out must not be empty")
	}
	for _, t := range c.Targets {
		if !(t > 0 && t <= 1) {
			return fmt.Errorf("--targets: %g outside (0,1]", t)
		}
	}
	if !slices.Contains(c.Targets, c.RefTarget) {
		return fmt.Errorf("--ref-target %g is not one of --targets %s", c.RefTarget, FormatFloats(c.Targets))
	}
	seen := map[Variant]bool{}
	for _, v := range c.Variants {
		if _, err := v.specArgs(); err != nil {
			return err
		}
		if seen[v] {
			return fmt.Errorf("--paradigms: %q twice", v)
		}
		seen[v] = true
	}
	for _, s := range c.Settings {
		for _, f := range s.Slowdown {
			if err := node.CheckSlowdown(f); err != nil {
				return err
			}
		}
		if s.Link != nil {
			if err := s.Link.Validate(); err != nil {
				return err
			}
			if s.Link.Nodes() != c.Workers {
				return fmt.Errorf("--link: %d hosts for --workers %d (one host a node)", s.Link.Nodes(), c.Workers)
			}
		}
		if s.Baseline != "" && !slices.ContainsFunc(c.Settings, func(b Setting) bool { return b.Name == s.Baseline && b.Baseline == "" }) {
			return fmt.Errorf("bench: setting %s is measured against %q, which is not a setting of its own", s.Name, s.Baseline)
		}
	}
	return nil
}

// ParadigmsResult is every run of one comparison.
type ParadigmsResult struct {
	Config ParadigmsConfig
	// Ceiling is the machine's compute ceiling in samples/s (0: not
	// measured; ParadigmsConfig.CeilingTime).
	Ceiling float64
	Runs    []RunSummary
	// Paths is the link lab's shaped topology as measured before the runs
	// (netlab.Lab.Paths), one line a path; nil without --link.
	Paths []string
	Start time.Time
	Took  time.Duration
}

// RunParadigms runs every (setting, variant, repeat) mesh in turn and
// writes the report into cfg.OutDir. A mesh that fails is recorded with its
// error and the comparison goes on; ctx cancelled stops it after the
// current mesh, and what was measured is still written.
func RunParadigms(ctx context.Context, cfg ParadigmsConfig, log *slog.Logger) (*ParadigmsResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	out := cfg.Out
	if out == nil {
		out = io.Discard
	}
	res := &ParadigmsResult{Config: cfg, Start: time.Now()}
	if cfg.CeilingTime > 0 && cfg.ComputeDelay == 0 {
		c, err := paradigmsCeiling(ctx, cfg.SpecArgs, cfg.CeilingTime)
		if err != nil {
			return nil, fmt.Errorf("bench: compute ceiling: %w", err)
		}
		res.Ceiling = c
		fmt.Fprintf(out, "compute ceiling: %.0f samples/s (one single-threaded worker in process, %v, × %d cores)\n", c, cfg.CeilingTime, runtime.NumCPU())
	}
	for _, set := range cfg.Settings {
		if set.Link != nil && set.Link.Shaped() && res.Paths == nil {
			paths, err := measureLink(ctx, *set.Link, log)
			if err != nil {
				return nil, fmt.Errorf("bench: measuring the link: %w", err)
			}
			res.Paths = paths
			for _, p := range paths {
				fmt.Fprintf(out, "link %s: %s\n", set.Link, p)
			}
		}
	}
	total := len(cfg.Settings) * len(cfg.Variants) * cfg.Repeats
	k := 0
	maxTarget := slices.Max(cfg.Targets)
	for rep := 1; rep <= cfg.Repeats; rep++ {
		// Repeats are the outer loop so that slow drifts of the shared
		// machine's load spread over every variant alike; a setting
		// measured against a baseline runs right after it.
		for _, group := range runOrder(cfg.Settings) {
			for _, v := range cfg.Variants {
				for _, set := range group {
					if ctx.Err() != nil {
						break
					}
					k++
					label := fmt.Sprintf("%d/%d %s %s #%d", k, total, set.Name, v, rep)
					fmt.Fprintf(out, "[%s] starting %d workers, until %.0f%% or %v\n", label, cfg.Workers, 100*maxTarget, cfg.TimeLimit)
					sum := runOne(ctx, cfg, set, v, rep, label, out, log)
					if res.Ceiling > 0 {
						sum.OfCeiling = sum.SamplesPerSec / res.Ceiling
					}
					res.Runs = append(res.Runs, sum)
					fmt.Fprintf(out, "[%s] %s\n", label, sum.Line(cfg.Targets))
				}
			}
		}
	}
	res.Took = time.Since(res.Start)
	if err := res.Write(cfg.OutDir); err != nil {
		return res, err
	}
	return res, ctx.Err()
}

func runOne(ctx context.Context, cfg ParadigmsConfig, set Setting, v Variant, rep int, label string, out io.Writer, log *slog.Logger) RunSummary {
	sum := RunSummary{Setting: set.Name, Variant: v, Repeat: rep, Limit: cfg.TimeLimit}
	args, _ := v.specArgs()
	lc := benchLaunch(benchMesh{Binary: cfg.Binary, Workers: cfg.Workers, Slowdown: set.Slowdown, Target: slices.Max(cfg.Targets),
		TimeLimit: cfg.TimeLimit, Poll: cfg.Poll, ReportDir: filepath.Join(cfg.OutDir, "runs", runDirName(set.Name, v, rep)),
		Threads: cfg.Threads, EvalEvery: cfg.EvalEvery, EvalSamples: cfg.EvalSamples})
	if cfg.ComputeDelay > 0 {
		lc.NodeArgs = append(lc.NodeArgs, "--compute-delay", cfg.ComputeDelay.String())
	}
	lc.NodeArgs = append(lc.NodeArgs, cfg.NodeArgs...)
	lc.SpecArgs = append(append([]string(nil), cfg.SpecArgs...), args...)
	lc.Out = &prefixWriter{w: out, prefix: "[" + label + "] ", all: cfg.Verbose}
	hosts, closeLab, err := onLink(ctx, set.Link, log)
	if err != nil {
		sum.Err = err.Error()
		return sum
	}
	defer closeLab()
	lc.Hosts = hosts
	r, err := launch.Run(ctx, lc, log)
	if err != nil {
		sum.Err = err.Error()
	}
	if r != nil {
		sum.fill(r, cfg.Targets)
	}
	return sum
}

// prefixWriter forwards whole lines with a prefix; unless all is set it
// drops the per-node lines of launch's progress view (they start with two
// spaces), keeping its one-line headline per refresh.
type prefixWriter struct {
	w      io.Writer
	prefix string
	all    bool
	buf    []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	for {
		i := slices.Index(p.buf, '\n')
		if i < 0 {
			break
		}
		line := string(p.buf[:i])
		p.buf = p.buf[i+1:]
		if line == "" || (!p.all && strings.HasPrefix(line, "  ")) {
			continue
		}
		if _, err := fmt.Fprintln(p.w, p.prefix+line); err != nil {
			return len(b), err
		}
	}
	return len(b), nil
}

// FormatFloats writes 1,1,2,4.
func FormatFloats(v []float64) string {
	s := make([]string, len(v))
	for i, f := range v {
		s[i] = strconv.FormatFloat(f, 'g', -1, 64)
	}
	return strings.Join(s, ",")
}

// paradigmsCeiling is the machine's compute ceiling in samples/s for the
// job of specArgs (over the default job): one single-threaded worker in
// process with no network for d, × the cores.
func paradigmsCeiling(ctx context.Context, specArgs []string, d time.Duration) (float64, error) {
	spec, err := ceilingSpec(specArgs)
	if err != nil {
		return 0, err
	}
	r, err := measureCeiling(ctx, spec, "", d)
	if err != nil {
		return 0, err
	}
	return ceilingSamples(runtime.NumCPU(), r, spec.BatchSize), nil
}

// ceilingSpec is the job of specArgs (job flags; others ignored).
func ceilingSpec(specArgs []string) (job.Spec, error) {
	spec := node.DefaultConfig().Spec
	fs := pflag.NewFlagSet("job", pflag.ContinueOnError)
	fs.ParseErrorsWhitelist.UnknownFlags = true
	spec.BindFlags(fs)
	return spec, fs.Parse(specArgs)
}

// concurrentCeiling is the samples/s of the job of specArgs with every
// core computing at once (measureConcurrent) for d.
func concurrentCeiling(ctx context.Context, specArgs []string, d time.Duration) (float64, error) {
	spec, err := ceilingSpec(specArgs)
	if err != nil {
		return 0, err
	}
	r, err := measureConcurrent(ctx, spec, d)
	if err != nil {
		return 0, err
	}
	return r.ItersPerSec * float64(spec.BatchSize), nil
}

// benchMesh is what a benchmark's mesh of `dssp node` processes takes
// from the benchmark's own configuration.
type benchMesh struct {
	Binary      string
	Workers     int
	Slowdown    []float64
	Target      float64
	TimeLimit   time.Duration
	Poll        time.Duration
	ReportDir   string
	Threads     int
	EvalEvery   time.Duration
	EvalSamples int
}

// benchLaunch is the launch configuration of a benchmark's mesh, as `dssp
// up` runs it (its charts too), its nodes on LAN detection with the
// benchmark's threads and evaluation cadence.
func benchLaunch(m benchMesh) launch.Config {
	lc := launch.DefaultConfig()
	lc.Binary = m.Binary
	lc.Nodes = m.Workers
	lc.Slowdown = m.Slowdown
	lc.TargetAcc = m.Target
	lc.TimeLimit = m.TimeLimit
	lc.Poll = m.Poll
	lc.ReportDir = m.ReportDir
	lc.NodeArgs = []string{"--detection", "lan", "--threads", strconv.Itoa(m.Threads), "--eval-every", m.EvalEvery.String()}
	if m.EvalSamples > 0 {
		lc.NodeArgs = append(lc.NodeArgs, "--eval-samples", strconv.Itoa(m.EvalSamples))
	}
	return lc
}
