package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"dsspmesh/node"
	"dsspmesh/node/job"
	"dsspmesh/node/launch"
)

// System is one of the trainings `dssp-lab bench pytorch` compares.
type System string

// The systems of [RunPyTorch], in the order each setting runs them.
const (
	// MeshPyTorch is the PyTorch MLP (examples/pytorch/mnist_mlp.py)
	// trained through a mesh of `dssp node --trainer external`, one
	// trainer process per node (`dssp up --trainer`).
	MeshPyTorch System = "pytorch"
	// MeshGo is the built-in Go MLP trained by the same mesh.
	MeshGo System = "go"
	// DDP is PyTorch DistributedDataParallel over gloo
	// (examples/pytorch/mnist_ddp.py), one process per rank.
	DDP System = "ddp"
)

// Systems lists every System in run order.
func Systems() []System { return []System{MeshPyTorch, MeshGo, DDP} }

// Label is the system's name in the report.
func (s System) Label() string {
	switch s {
	case MeshPyTorch:
		return "mesh, PyTorch trainers"
	case MeshGo:
		return "mesh, built-in Go MLP"
	case DDP:
		return "PyTorch DDP (gloo)"
	}
	return string(s)
}

// PyTorchConfig is one `dssp-lab bench pytorch` run: for every setting, the
// PyTorch MLP through the mesh, the built-in Go MLP through the mesh and
// PyTorch DDP, back to back, on the same model, batch and learning rate.
type PyTorchConfig struct {
	Binary string // the dssp binary the meshes run
	// Python is the interpreter of the trainers and of DDP; it must import
	// torch and numpy (internal/python.Find).
	Python string
	// Examples is the folder of mnist_mlp.py and mnist_ddp.py
	// (examples/pytorch of the repository).
	Examples string
	Workers  int // nodes of each mesh, ranks of DDP
	Systems  []System
	// Settings are the worker speeds: each Setting's Slowdown goes to the
	// nodes' --slowdown and to mnist_ddp.py's --slowdowns (both stretch
	// only measured compute).
	Settings []Setting
	Target   float64 // the test accuracy whose time is reported
	// TimeLimit bounds each training: a mesh's from its nodes' start, DDP's
	// from its process's start (mnist_ddp.py --time).
	TimeLimit time.Duration
	Batch     int // every worker's batch, mesh and DDP
	// Optimizer (sgd or adamw), LR and Momentum (sgd) are every system's:
	// the PyTorch trainers' and DDP's torch optimizer, the built-in
	// workers' own (--optimizer, --lr, --momentum; constant rate
	// everywhere).
	Optimizer string
	LR        float64
	Momentum  float64
	// EvalEvery is every system's evaluation cadence (a mesh's
	// --eval-every, DDP's rank 0 every EvalEvery of its clock, the other
	// ranks waiting), EvalSamples the test samples of every evaluation, the
	// first ones of the test set for all three (0: all 10000): evaluation
	// counts alike. A mesh's evaluator trains too, and an external
	// trainer's evaluation stalls its training.
	EvalEvery   time.Duration
	EvalSamples int
	// Threads is every node's --threads and every trainer's and rank's
	// torch threads.
	Threads int
	Poll    time.Duration
	// Data is the MNIST folder given to the nodes (--data) and the Python
	// processes (--data); "" lets each find its own (the Go module cache).
	Data string
	// SpecArgs are further job flags for both meshes (the paradigm, e.g.
	// --paradigm ssp --s-lower 3), after the benchmark's own.
	SpecArgs []string
	NodeArgs []string // further flags for every node
	// MeshTarget is the targets' ratio mesh-PyTorch ÷ DDP time to Target
	// on equal workers, MixedTarget with slowdowns, BridgeTarget the
	// bridge's time ÷ the iteration's, WaitTarget a trainer's wait for its
	// next compute ÷ its round.
	MeshTarget, MixedTarget, BridgeTarget, WaitTarget float64
	OutDir                                            string // report.md, results.csv, runs/
	Out                                               io.Writer
	Verbose                                           bool
}

// DefaultPyTorchConfig is the comparison: 4 workers, equal speeds
// and slowdowns 1,1,2,4, time to 97 %, 10 minutes a training, the settings
// a DDP user picks for the MLP (SGD, lr 0.05, momentum 0.9, batch 64 a
// worker) on every system, evaluations every 2 s on the first 2000 test
// samples, targets 0.8× and 0.5× DDP's time, the bridge 10 % and the wait
// 20 % of a round.
func DefaultPyTorchConfig() PyTorchConfig {
	return PyTorchConfig{
		Workers: 4, Systems: Systems(),
		Settings: []Setting{{Name: "equal"}, {Name: "mixed", Slowdown: []float64{1, 1, 2, 4}}},
		Target:   0.97, TimeLimit: 10 * time.Minute, Batch: 64, Optimizer: "sgd", LR: 0.05, Momentum: 0.9,
		EvalEvery: 2 * time.Second, EvalSamples: 2000, Threads: 1, Poll: time.Second,
		Examples:   filepath.Join("examples", "pytorch"),
		MeshTarget: 0.8, MixedTarget: 0.5, BridgeTarget: 0.10, WaitTarget: 0.20, OutDir: "bench-pytorch",
	}
}

// Validate names the first bad value.
func (c PyTorchConfig) Validate() error {
	switch {
	case c.Binary == "":
		return errors.New("bench: no dssp binary to start")
	case c.Workers < 1 || c.Workers > 64:
		return fmt.Errorf("--workers %d outside 1..64", c.Workers)
	case len(c.Systems) == 0:
		return errors.New("--systems is empty")
	case len(c.Settings) == 0:
		return errors.New("bench: no setting to run (--equal=false and no --slowdown)")
	case !(c.Target > 0 && c.Target <= 1):
		return fmt.Errorf("--target %g outside (0,1]", c.Target)
	case c.TimeLimit <= 0:
		return fmt.Errorf("--time-limit %v must be > 0", c.TimeLimit)
	case c.Batch < 1:
		return fmt.Errorf("--batch %d must be >= 1", c.Batch)
	case !(c.LR > 0):
		return fmt.Errorf("--lr %g must be > 0", c.LR)
	case c.Optimizer != "sgd" && c.Optimizer != "adamw":
		return fmt.Errorf("--optimizer %q: sgd or adamw", c.Optimizer)
	case !(c.Momentum >= 0 && c.Momentum < 1):
		return fmt.Errorf("--momentum %g outside [0, 1)", c.Momentum)
	case c.Optimizer == "adamw" && c.Systems != nil && slices.Contains(c.Systems, MeshGo):
		return errors.New("--optimizer adamw: the built-in Go MLP has no AdamW; leave go out of --systems")
	case c.EvalEvery <= 0:
		return fmt.Errorf("--eval-every %v must be > 0", c.EvalEvery)
	case c.EvalSamples < 0:
		return fmt.Errorf("--eval-samples %d must be >= 0 (0: the whole test set)", c.EvalSamples)
	case c.Threads < 1:
		return fmt.Errorf("--threads %d must be >= 1", c.Threads)
	case c.Poll <= 0:
		return fmt.Errorf("--poll %v must be > 0", c.Poll)
	case c.OutDir == "":
		return errors.New("--out must not be empty")
	}
	seen := map[System]bool{}
	for _, s := range c.Systems {
		if !slices.Contains(Systems(), s) {
			return fmt.Errorf("--systems: %q unknown (known: pytorch, go, ddp)", s)
		}
		if seen[s] {
			return fmt.Errorf("--systems: %q twice", s)
		}
		seen[s] = true
	}
	for _, s := range c.Settings {
		for _, f := range s.Slowdown {
			if err := node.CheckSlowdown(f); err != nil {
				return err
			}
		}
	}
	if c.Python == "" && (seen[MeshPyTorch] || seen[DDP]) {
		return errors.New("bench: no python that imports torch and numpy ($DSSP_PYTHON, python3, /usr/bin/python3; Debian: apt-get install python3-torch)")
	}
	for _, s := range []System{MeshPyTorch, DDP} {
		if !seen[s] {
			continue
		}
		if _, err := os.Stat(c.script(s)); err != nil {
			return fmt.Errorf("--examples %s: %w (run from the repository or name its examples/pytorch)", c.Examples, err)
		}
	}
	return nil
}

func (c PyTorchConfig) script(s System) string {
	if s == DDP {
		return filepath.Join(c.Examples, "mnist_ddp.py")
	}
	return filepath.Join(c.Examples, "mnist_mlp.py")
}

// Bridge is the trainer bridge's own cost per iteration of one node, as
// the node and its trainer measured it.
type Bridge struct {
	Node string
	// Iteration is the worker's mean iteration (compute, with the
	// emulated slowdown, and wait) from its /status counters.
	Iteration time.Duration
	// Compute is the compute part of that iteration: the worker's Gradient
	// call, which for an external trainer is the θ copy and the compute
	// request's round trip (stretched by --slowdown).
	Compute time.Duration
	// NodeSide is the node's view: θ's copy into shared memory plus the
	// compute request's round trip less the trainer's own compute
	// (/status trainer: copy_us + round_trip_us − trainer_us); NodeBytes
	// the bytes it copied per iteration.
	NodeSide  time.Duration
	NodeBytes float64
	// TrainerSide is the trainer's view (dsspmesh Optimizer.stats: θ
	// loaded into the model, gradients written, framing), TrainerBytes its
	// bytes copied per round; -1 where its log gave none.
	TrainerSide  time.Duration
	TrainerBytes float64
	// Evaluating is the time the trainer spent evaluating for the mesh
	// (on a copy of its model on a thread beside its training, or in step where it cannot copy it), from its log; 0 if none.
	Evaluating time.Duration
	// TrainerWait is the share of the trainer's time it waited for its
	// next compute (dsspmesh's stats: the node pushing its update and the
	// gate), from its log's last line; -1 where it gave none.
	TrainerWait float64
}

// NodeShare is the node-side bridge ÷ the iteration (0 when unknown).
func (b Bridge) NodeShare() float64 { return share(b.NodeSide, b.Iteration) }

// NodeComputeShare is the node-side bridge ÷ the iteration's compute part
// (0 when unknown): the share of the bridge in the compute edge alone.
func (b Bridge) NodeComputeShare() float64 { return share(b.NodeSide, b.Compute) }

// TrainerShare is the trainer-side bridge ÷ the iteration (0 when unknown).
func (b Bridge) TrainerShare() float64 { return share(b.TrainerSide, b.Iteration) }

func share(part, whole time.Duration) float64 {
	if part < 0 || whole <= 0 {
		return 0
	}
	return float64(part) / float64(whole)
}

// SystemRun is what one training measured.
type SystemRun struct {
	Setting string
	System  System
	// ToTarget is the time to the first evaluation at or above the target
	// (NotReached if none): a mesh's from the moment all its nodes were
	// started, so it includes forming and the trainers' start; DDP's from
	// its ranks' process group formed, its evaluations left out.
	ToTarget time.Duration
	// FirstIter is, for a mesh, when its first worker had completed an
	// iteration (the first poll that showed one), on ToTarget's clock: the
	// mesh's start-up (forming, trainers importing torch and loading data).
	// 0 for DDP, whose ToTarget starts with its training.
	FirstIter     time.Duration
	FinalAcc      float64
	SamplesPerSec float64
	// Wall is the whole training's wall-clock time, start to stop.
	Wall    time.Duration
	Bridges []Bridge // per node, MeshPyTorch only
	Load    float64  // 1-minute load average at the end
	Err     string
}

// Training is the time to the target from the first iteration
// (ToTarget − FirstIter), or NotReached.
func (r SystemRun) Training() time.Duration {
	if r.ToTarget == NotReached {
		return NotReached
	}
	return r.ToTarget - r.FirstIter
}

// Bridge is the mean over the nodes of their bridges (Node "mean"; its
// Evaluating is the sum), and whether there were any.
func (r SystemRun) Bridge() (Bridge, bool) {
	m := Bridge{Node: "mean", TrainerWait: -1}
	n, nt, nw := 0, 0, 0
	var wait float64
	var it, cp, ns, ts time.Duration
	for _, b := range r.Bridges {
		if b.Iteration <= 0 {
			continue
		}
		n++
		it += b.Iteration
		cp += b.Compute
		ns += b.NodeSide
		m.NodeBytes += b.NodeBytes
		m.Evaluating += b.Evaluating // the total: one node evaluates
		if b.TrainerWait >= 0 {
			nw++
			wait += b.TrainerWait
		}
		if b.TrainerSide >= 0 {
			nt++
			ts += b.TrainerSide
			m.TrainerBytes += b.TrainerBytes
		}
	}
	if n == 0 {
		return m, false
	}
	m.Iteration, m.Compute, m.NodeSide, m.NodeBytes = it/time.Duration(n), cp/time.Duration(n), ns/time.Duration(n), m.NodeBytes/float64(n)
	if nt > 0 {
		m.TrainerSide, m.TrainerBytes = ts/time.Duration(nt), m.TrainerBytes/float64(nt)
	} else {
		m.TrainerSide, m.TrainerBytes = -1, -1
	}
	if nw > 0 {
		m.TrainerWait = wait / float64(nw)
	}
	return m, true
}

// PyTorchResult is every training of one comparison.
type PyTorchResult struct {
	Config PyTorchConfig
	Runs   []SystemRun
	Start  time.Time
	Took   time.Duration
}

// Run is the training of sys in setting, if it ran.
func (r *PyTorchResult) Run(setting string, sys System) (SystemRun, bool) {
	for _, x := range r.Runs {
		if x.Setting == setting && x.System == sys {
			return x, true
		}
	}
	return SystemRun{}, false
}

// RunPyTorch runs every (setting, system) training in turn and writes the
// report into cfg.OutDir. A training that fails is recorded with its error
// and the comparison goes on; ctx cancelled stops it after the current
// training, and what was measured is still written.
func RunPyTorch(ctx context.Context, cfg PyTorchConfig, log *slog.Logger) (*PyTorchResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	w := out(cfg.Out)
	res := &PyTorchResult{Config: cfg, Start: time.Now()}
	total, k := len(cfg.Settings)*len(cfg.Systems), 0
	for _, set := range cfg.Settings {
		for _, sys := range Systems() { // the fixed order, whatever --systems lists
			if !slices.Contains(cfg.Systems, sys) || ctx.Err() != nil {
				continue
			}
			k++
			label := fmt.Sprintf("%d/%d %s %s", k, total, set.Name, sys)
			fmt.Fprintf(w, "[%s] %s, %d workers, until %.0f%% or %v\n", label, sys.Label(), cfg.Workers, 100*cfg.Target, cfg.TimeLimit)
			var run SystemRun
			if sys == DDP {
				run = runDDP(ctx, cfg, set, label, w)
			} else {
				run = runMeshSystem(ctx, cfg, set, sys, label, w, log)
			}
			run.Load = LoadAverage()
			res.Runs = append(res.Runs, run)
			fmt.Fprintf(w, "[%s] %s\n", label, run.Line(cfg))
		}
	}
	res.Took = time.Since(res.Start)
	if err := res.Write(cfg.OutDir); err != nil {
		return res, err
	}
	return res, ctx.Err()
}

// jobArgs are both meshes' job flags: the batch and the built-in workers'
// own optimizer at the benchmark's settings, at a constant rate (the
// PyTorch trainers bring their own optimizer: trainerCommand).
func (c PyTorchConfig) jobArgs() []string {
	opt := "momentum"
	if c.Momentum == 0 {
		opt = "sgd"
	}
	args := []string{"--batch", strconv.Itoa(c.Batch), "--lr", strconv.FormatFloat(c.LR, 'g', -1, 64), "--optimizer", opt,
		"--momentum", strconv.FormatFloat(c.Momentum, 'g', -1, 64), "--lr-decay", "1"}
	return append(args, c.SpecArgs...)
}

func runMeshSystem(ctx context.Context, cfg PyTorchConfig, set Setting, sys System, label string, w io.Writer, log *slog.Logger) SystemRun {
	run := SystemRun{Setting: set.Name, System: sys, ToTarget: NotReached}
	dir, err := os.MkdirTemp("", "dssp-bench-pytorch-*")
	if err != nil {
		run.Err = err.Error()
		return run
	}
	defer os.RemoveAll(dir)
	name := set.Name + "-" + string(sys)
	lc := benchLaunch(benchMesh{Binary: cfg.Binary, Workers: cfg.Workers, Slowdown: set.Slowdown, Target: cfg.Target,
		TimeLimit: cfg.TimeLimit, Poll: cfg.Poll, ReportDir: filepath.Join(cfg.OutDir, "runs", name),
		Threads: cfg.Threads, EvalEvery: cfg.EvalEvery, EvalSamples: cfg.EvalSamples})
	lc.Dir = dir
	if cfg.Data != "" {
		lc.NodeArgs = append(lc.NodeArgs, "--data", cfg.Data)
	}
	lc.NodeArgs = append(lc.NodeArgs, cfg.NodeArgs...)
	if sys == MeshPyTorch {
		lc.NodeArgs = append(lc.NodeArgs, "--trainer", node.TrainerExternal)
		lc.SpecArgs = append([]string{"--model=" + job.ExternalModel}, cfg.jobArgs()...)
		lc.Trainer = cfg.trainerCommand()
	} else {
		lc.SpecArgs = append([]string{"--model", "mlp"}, cfg.jobArgs()...)
	}
	lc.Out = &prefixWriter{w: w, prefix: "[" + label + "] ", all: cfg.Verbose}
	hosts, closeLab, err := onLink(ctx, set.Link, log)
	if err != nil {
		run.Err = err.Error()
		return run
	}
	defer closeLab()
	lc.Hosts = hosts
	start := time.Now()
	r, err := launch.Run(ctx, lc, log)
	run.Wall = time.Since(start)
	if err != nil {
		run.Err = err.Error()
	}
	if r == nil {
		return run
	}
	run.ToTarget = TimesToTargets(r.Evals, []float64{cfg.Target})[0]
	if run.ToTarget != NotReached {
		run.ToTarget += r.Startup // from the first node process's start, as DDP's from its process's
	}
	if r.Final != nil {
		run.FinalAcc = r.Final.Accuracy
	}
	for _, smp := range r.Samples {
		if smp.Up && smp.Worker.Iter > 0 {
			run.FirstIter = smp.Elapsed + r.Startup
			break
		}
	}
	// The workers' own sample counters: a round of local steps is H
	// batches, which iterations × batch would count as one.
	polls, _ := groupPolls(r.Samples, func(s launch.Sample) uint64 { return s.Worker.Samples })
	run.SamplesPerSec = pollRate(polls)
	if sys == MeshPyTorch {
		run.Bridges = bridges(r.Samples)
		for i := range run.Bridges {
			b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("trainer%d.log", i)))
			if err == nil {
				run.Bridges[i].TrainerSide, run.Bridges[i].TrainerBytes = TrainerBridge(string(b))
				run.Bridges[i].Evaluating = TrainerEvaluating(string(b))
				run.Bridges[i].TrainerWait = TrainerWaitShare(string(b))
			}
		}
	}
	keepLogs(dir, lc.ReportDir)
	return run
}

// keepLogs copies the run folder's node and trainer logs into the
// report's folder (the run folder, with its data dirs, is removed).
func keepLogs(dir, to string) {
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if len(logs) == 0 || os.MkdirAll(to, 0o755) != nil {
		return
	}
	for _, l := range logs {
		if b, err := os.ReadFile(l); err == nil {
			_ = os.WriteFile(filepath.Join(to, filepath.Base(l)), b, 0o644)
		}
	}
}

// trainerCommand is the `dssp up --trainer` command: mnist_mlp.py with the
// benchmark's interpreter, threads, data and evaluation size.
func (c PyTorchConfig) trainerCommand() string {
	args := []string{c.Python, c.script(MeshPyTorch), "--threads", strconv.Itoa(c.Threads), "--log-every", "5",
		"--optimizer", c.Optimizer, "--lr", strconv.FormatFloat(c.LR, 'g', -1, 64), "--momentum", strconv.FormatFloat(c.Momentum, 'g', -1, 64)}
	if c.EvalSamples > 0 {
		args = append(args, "--eval-samples", strconv.Itoa(c.EvalSamples))
	}
	if c.Data != "" {
		args = append(args, "--data", c.Data)
	}
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// bridges is each node's bridge from its last poll with a trainer attached
// and at least one iteration.
func bridges(samples []launch.Sample) []Bridge {
	var out []Bridge
	for _, s := range samples {
		if !s.Up || s.Trainer == nil || !s.Trainer.Attached || s.Trainer.Iterations == 0 || s.Worker.Iter == 0 {
			continue
		}
		for len(out) <= s.Node {
			out = append(out, Bridge{TrainerSide: -1, TrainerBytes: -1, TrainerWait: -1})
		}
		t := s.Trainer
		b := &out[s.Node]
		b.Node = s.ID
		b.Iteration = time.Duration((s.Worker.ComputeSeconds + s.Worker.WaitSeconds) / float64(s.Worker.Iter) * 1e9)
		b.Compute = time.Duration(s.Worker.ComputeSeconds / float64(s.Worker.Iter) * 1e9)
		b.NodeSide = time.Duration((t.CopyMicros + max(0, t.RoundTripMicros-t.TrainerMicros)) * 1e3)
		b.NodeBytes = t.BytesCopiedPerIter
	}
	return out
}

var (
	trainerBridgeRE = regexp.MustCompile(`bridge ([0-9.]+) µs/round`)
	trainerBytesRE  = regexp.MustCompile(`(\d+) bytes copied/round`)
)

// TrainerBridge reads the trainer's own bridge cost from the last line of
// its log that gives it (mnist_mlp.py prints dsspmesh's Optimizer.stats:
// "bridge 412.3 µs/round ... 1880000 bytes copied/round"); -1, -1 when
// none does.
func TrainerBridge(log string) (time.Duration, float64) {
	lines := strings.Split(log, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		m, b := trainerBridgeRE.FindStringSubmatch(lines[i]), trainerBytesRE.FindStringSubmatch(lines[i])
		if m == nil || b == nil {
			continue
		}
		us, err1 := strconv.ParseFloat(m[1], 64)
		n, err2 := strconv.ParseFloat(b[1], 64)
		if err1 != nil || err2 != nil {
			continue
		}
		return time.Duration(us * 1e3), n
	}
	return -1, -1
}

var trainerWaitRE = regexp.MustCompile(`in ([0-9.]+) s, .*wait ([0-9.]+) ms/round over (\d+) rounds`)

// TrainerWaitShare reads the share of its time a trainer waited for its
// next compute from the last line of its log that gives it (mnist_mlp.py's
// final line: "... in 61.0 s, ... wait 12.50 ms/round over 4000 rounds");
// -1 when none does.
func TrainerWaitShare(log string) float64 {
	m := trainerWaitRE.FindAllStringSubmatch(log, -1)
	if len(m) == 0 {
		return -1
	}
	last := m[len(m)-1]
	secs, err1 := strconv.ParseFloat(last[1], 64)
	ms, err2 := strconv.ParseFloat(last[2], 64)
	rounds, err3 := strconv.ParseFloat(last[3], 64)
	if err1 != nil || err2 != nil || err3 != nil || secs <= 0 {
		return -1
	}
	return ms * rounds / 1e3 / secs
}

var trainerEvalRE = regexp.MustCompile(`(\d+) evaluations \(([0-9.]+) s\)`)

// TrainerEvaluating reads the time the trainer spent evaluating from the
// last line of its log that gives it (mnist_mlp.py's final line: "12
// evaluations (1.5 s)"); 0 when none does.
func TrainerEvaluating(log string) time.Duration {
	m := trainerEvalRE.FindAllStringSubmatch(log, -1)
	if len(m) == 0 {
		return 0
	}
	v, err := strconv.ParseFloat(m[len(m)-1][2], 64)
	if err != nil {
		return 0
	}
	return time.Duration(v * 1e9)
}

// DDPSummary is mnist_ddp.py's last line.
type DDPSummary struct {
	Procs         int      `json:"procs"`
	Batch         int      `json:"batch"`
	TimeToTarget  *float64 `json:"time_to_target_s"`
	Accuracy      float64  `json:"accuracy"`
	Seconds       float64  `json:"seconds"`
	SamplesPerSec float64  `json:"samples_per_s"`
	Steps         int      `json:"steps"`
}

// ParseDDP reads the JSON summary mnist_ddp.py prints last.
func ParseDDP(stdout string) (DDPSummary, error) {
	var s DDPSummary
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "{") {
			continue
		}
		if err := json.Unmarshal([]byte(l), &s); err != nil {
			return s, fmt.Errorf("bench: mnist_ddp.py summary %q: %w", l, err)
		}
		return s, nil
	}
	return s, fmt.Errorf("bench: mnist_ddp.py printed no JSON summary (last line %q)", lastLine(stdout))
}

func runDDP(ctx context.Context, cfg PyTorchConfig, set Setting, label string, w io.Writer) SystemRun {
	run := SystemRun{Setting: set.Name, System: DDP, ToTarget: NotReached}
	ports, err := launch.FreePorts(1)
	if err != nil {
		run.Err = err.Error()
		return run
	}
	args := []string{cfg.script(DDP), "--procs", strconv.Itoa(cfg.Workers), "--batch", strconv.Itoa(cfg.Batch),
		"--optimizer", cfg.Optimizer, "--lr", strconv.FormatFloat(cfg.LR, 'g', -1, 64), "--momentum", strconv.FormatFloat(cfg.Momentum, 'g', -1, 64),
		"--target", strconv.FormatFloat(cfg.Target, 'g', -1, 64),
		"--time", strconv.FormatFloat(cfg.TimeLimit.Seconds(), 'f', -1, 64), "--eval-every", strconv.FormatFloat(cfg.EvalEvery.Seconds(), 'f', -1, 64),
		"--threads", strconv.Itoa(cfg.Threads), "--port", strconv.Itoa(ports[0]), "--eval-samples", strconv.Itoa(cfg.EvalSamples)}
	if sd := set.Slowdown; len(sd) > 0 {
		per := make([]float64, cfg.Workers)
		for i := range per {
			per[i] = sd[i%len(sd)] // cycled over the ranks, as launch cycles them over the nodes
		}
		args = append(args, "--slowdowns", FormatFloats(per))
	}
	if cfg.Data != "" {
		args = append(args, "--data", cfg.Data)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.TimeLimit+3*time.Minute)
	defer cancel()
	hosts, closeLab, err := onLink(ctx, set.Link, slog.New(slog.DiscardHandler))
	if err != nil {
		run.Err = err.Error()
		return run
	}
	defer closeLab()
	cmd := exec.CommandContext(ctx, cfg.Python, args...)
	// On the link lab each rank runs on its own host, rank 0's address
	// the master: the others (ranks) start first, their output to the log.
	// gloo binds the interface the host name resolves to unless told: in a
	// lab host's namespace that is not its data link, eth0.
	var ranks []*exec.Cmd
	if len(hosts) > 0 {
		if len(hosts) < cfg.Workers {
			run.Err = fmt.Sprintf("%d ranks on a link lab of %d hosts", cfg.Workers, len(hosts))
			return run
		}
		args = append(args, "--master", hosts[0].Addr)
		env := append(os.Environ(), "GLOO_SOCKET_IFNAME=eth0")
		for i := range cfg.Workers {
			argv := append(slices.Concat(hosts[i].Exec, []string{cfg.Python}, args), "--rank", strconv.Itoa(i))
			r := exec.CommandContext(ctx, argv[0], argv[1:]...)
			r.Env = env
			ranks = append(ranks, r)
		}
		cmd, ranks = ranks[0], ranks[1:]
	}
	var stdout bytes.Buffer
	logPath := filepath.Join(cfg.OutDir, "runs", set.Name+"-ddp.log")
	var logw io.Writer = io.Discard
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err == nil {
		if f, err := os.Create(logPath); err == nil {
			defer f.Close()
			logw = f
		}
	}
	prog := &prefixWriter{w: w, prefix: "[" + label + "] ", all: cfg.Verbose}
	cmd.Stdout = io.MultiWriter(&stdout, logw, &everyNth{w: prog, n: ddpLineEvery(cfg.Verbose)})
	cmd.Stderr = logw
	start := time.Now()
	for _, r := range ranks {
		r.Stdout, r.Stderr = logw, logw
		if err := r.Start(); err != nil {
			run.Err = err.Error()
			return run
		}
	}
	err = cmd.Run()
	for _, r := range ranks {
		if werr := r.Wait(); werr != nil && err == nil {
			err = fmt.Errorf("a rank: %w", werr)
		}
	}
	run.Wall = time.Since(start)
	sum, perr := ParseDDP(stdout.String())
	switch {
	case err != nil:
		run.Err = fmt.Sprintf("%s %s: %v (log %s)", cfg.Python, strings.Join(args, " "), err, logPath)
	case perr != nil:
		run.Err = perr.Error()
	}
	if perr == nil {
		if sum.TimeToTarget != nil {
			run.ToTarget = time.Duration(*sum.TimeToTarget * 1e9)
		}
		run.FinalAcc, run.SamplesPerSec = sum.Accuracy, sum.SamplesPerSec
	}
	return run
}

// everyNth forwards every nth line (and every JSON line) to w: DDP's
// evaluation lines as a progress view.
type everyNth struct {
	w    io.Writer
	n, i int
	buf  []byte
}

func (e *everyNth) Write(b []byte) (int, error) {
	e.buf = append(e.buf, b...)
	for {
		i := bytes.IndexByte(e.buf, '\n')
		if i < 0 {
			return len(b), nil
		}
		line := e.buf[:i+1]
		if e.i%e.n == 0 || bytes.HasPrefix(line, []byte("{")) {
			e.w.Write(line)
		}
		e.i++
		e.buf = e.buf[i+1:]
	}
}

// Line is a one-line summary for the progress view.
func (r SystemRun) Line(cfg PyTorchConfig) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%.0f%%: %s  final %.2f%%  %.0f samples/s  wall %.1fs", 100*cfg.Target, fmtTime(r.ToTarget, cfg.TimeLimit),
		100*r.FinalAcc, r.SamplesPerSec, r.Wall.Seconds())
	if m, ok := r.Bridge(); ok {
		fmt.Fprintf(&b, "  bridge %s node-side (%.1f%% of %s)", fmtMicros(m.NodeSide), 100*m.NodeShare(), fmtMillis(m.Iteration))
		if m.TrainerSide >= 0 {
			fmt.Fprintf(&b, ", %s trainer-side (%.1f%%)", fmtMicros(m.TrainerSide), 100*m.TrainerShare())
		}
	}
	fmt.Fprintf(&b, "  load %.1f", r.Load)
	if r.Err != "" {
		b.WriteString("  error: " + r.Err)
	}
	return b.String()
}

func fmtMicros(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/1e3) }
func fmtMillis(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }

// TargetRatio is one of the report's ratios against its target.
type TargetRatio struct {
	Name  string
	Value float64 // NaN-free: Known says whether it could be computed
	Known bool
	// Bound: Value is an upper bound — the numerator reached the target
	// and the denominator had not by the time limit, so the ratio is
	// below Value (the limit standing in for the denominator's time).
	Bound  bool
	Target float64 // the ratio must be ≤ Target; 0: no target
	Share  bool    // written as a percentage
}

// Met reports whether the ratio is known and within its target.
func (q TargetRatio) Met() bool { return q.Known && (q.Target == 0 || q.Value <= q.Target) }

func (q TargetRatio) String() string {
	v := "— (not measured: a run missing, failed or short of the target)"
	t := fmt.Sprintf("%.2g", q.Target)
	if q.Share {
		t = fmt.Sprintf("%.0f%%", 100*q.Target)
	}
	switch {
	case q.Known && q.Share:
		v = fmt.Sprintf("%.1f%%", 100*q.Value)
	case q.Known && q.Bound:
		v = fmt.Sprintf("< %.2f (the second not at the target within the time limit)", q.Value)
	case q.Known:
		v = fmt.Sprintf("%.2f", q.Value)
	}
	if q.Target == 0 {
		return fmt.Sprintf("%s: %s", q.Name, v)
	}
	return fmt.Sprintf("%s: %s (target ≤ %s: %s)", q.Name, v, t, verdict(q.Met()))
}

// timeRatio is a ÷ b of two times to target; unknown when either was not
// reached.
func timeRatio(a, b time.Duration) (float64, bool) {
	if a == NotReached || b == NotReached || a <= 0 || b <= 0 {
		return 0, false
	}
	return a.Seconds() / b.Seconds(), true
}

// timeRatioBound is timeRatio, or, when a reached the target and b did
// not within limit, a ÷ limit as an upper bound of the ratio.
func timeRatioBound(a, b, limit time.Duration) (v float64, known, bound bool) {
	if v, ok := timeRatio(a, b); ok {
		return v, true, false
	}
	if b == NotReached && a > 0 && a != NotReached && limit > 0 {
		return a.Seconds() / limit.Seconds(), true, true
	}
	return 0, false, false
}

// Ratios are the report's ratios for setting: mesh-PyTorch ÷ DDP and
// mesh-PyTorch ÷ mesh-Go time to the target, mesh-PyTorch ÷ DDP
// samples/s, and the bridge's time ÷ the iteration's (node-side and
// trainer-side), each with its target where the issue sets one.
func (r *PyTorchResult) Ratios(set Setting) []TargetRatio {
	c := r.Config
	pt, okPT := r.Run(set.Name, MeshPyTorch)
	ddp, okDDP := r.Run(set.Name, DDP)
	gm, okGo := r.Run(set.Name, MeshGo)
	target := c.MeshTarget
	if len(set.Slowdown) > 0 && slices.ContainsFunc(set.Slowdown, func(f float64) bool { return f != 1 }) {
		target = c.MixedTarget
	}
	pct := fmt.Sprintf("%.0f%%", 100*c.Target)
	var out []TargetRatio
	if okPT && okDDP {
		v, ok, bound := timeRatioBound(pt.ToTarget, ddp.ToTarget, c.TimeLimit)
		out = append(out, TargetRatio{Name: "time to " + pct + ", mesh-PyTorch ÷ DDP", Value: v, Known: ok, Bound: bound, Target: target})
		v, ok = timeRatio(pt.Training(), ddp.Training())
		out = append(out, TargetRatio{Name: "time to " + pct + " from the first iteration, mesh-PyTorch ÷ DDP", Value: v, Known: ok})
		out = append(out, TargetRatio{Name: "DDP's samples/s ÷ mesh-PyTorch's (target: the trainers move at least DDP's)", Value: safeDiv(ddp.SamplesPerSec, pt.SamplesPerSec),
			Known: pt.SamplesPerSec > 0 && ddp.SamplesPerSec > 0, Target: 1})
	}
	if okPT && okGo {
		v, ok := timeRatio(pt.ToTarget, gm.ToTarget)
		out = append(out, TargetRatio{Name: "time to " + pct + ", mesh-PyTorch ÷ mesh-Go", Value: v, Known: ok})
	}
	if okGo && okDDP {
		v, ok := timeRatio(gm.ToTarget, ddp.ToTarget)
		out = append(out, TargetRatio{Name: "time to " + pct + ", mesh-Go ÷ DDP", Value: v, Known: ok})
	}
	if okPT {
		m, ok := pt.Bridge()
		out = append(out, TargetRatio{Name: "bridge ÷ iteration, node-side", Value: m.NodeShare(), Known: ok, Target: c.BridgeTarget, Share: true})
		out = append(out, TargetRatio{Name: "bridge ÷ iteration, trainer-side", Value: m.TrainerShare(), Known: ok && m.TrainerSide >= 0, Target: c.BridgeTarget, Share: true})
		out = append(out, TargetRatio{Name: "bridge ÷ the iteration's compute (round trip), node-side", Value: m.NodeComputeShare(), Known: ok && m.Compute > 0, Share: true})
		out = append(out, TargetRatio{Name: "a trainer's wait for its next compute ÷ its time", Value: m.TrainerWait, Known: ok && m.TrainerWait >= 0, Target: c.WaitTarget, Share: true})
	}
	return out
}

func safeDiv(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// Markdown is the report: per setting, each system's figures, then the
// ratios against their targets.
func (r *PyTorchResult) Markdown() string {
	c := r.Config
	var b strings.Builder
	fmt.Fprintf(&b, "# PyTorch through the mesh vs the built-in MLP vs PyTorch DDP\n\n")
	fmt.Fprintf(&b, "%d workers, MNIST MLP (784-256-128-10), batch %d per worker, every system with %s, "+
		"target %.0f%% test accuracy on %s, limit %v per training, %d torch/compute thread(s) per worker; every system evaluates every %v "+
		"(a mesh's evaluator, DDP's rank 0 with the others waiting). Job: %s. Started %s, took %s.\n\n",
		c.Workers, c.Batch, c.optimizerText(), 100*c.Target, evalSamplesText(c.EvalSamples), c.TimeLimit, c.Threads, c.EvalEvery,
		jobLabel(c.jobArgs()), r.Start.UTC().Format(time.RFC3339), r.Took.Round(time.Second))
	for _, set := range c.Settings {
		fmt.Fprintf(&b, "## %s\n\n", set)
		b.WriteString("| system | time to target | of it start-up | final accuracy | samples/s | wall | load | error |\n|---|---|---|---|---|---|---|---|\n")
		for _, sys := range Systems() {
			run, ok := r.Run(set.Name, sys)
			if !ok {
				continue
			}
			fmt.Fprintf(&b, "| %s | %s | %.1fs | %.2f%% | %.0f | %.1fs | %.1f | %s |\n", sys.Label(), fmtTime(run.ToTarget, c.TimeLimit),
				run.FirstIter.Seconds(), 100*run.FinalAcc, run.SamplesPerSec, run.Wall.Seconds(), run.Load, run.Err)
		}
		if pt, ok := r.Run(set.Name, MeshPyTorch); ok && len(pt.Bridges) > 0 {
			b.WriteString("\nThe bridge per iteration (node-side: θ copied into shared memory + the compute request's round trip − the trainer's compute; trainer-side: dsspmesh's own copies and framing; evaluating: the trainer's time evaluating for the mesh, on a copy of its model on a thread beside its training):\n\n")
			b.WriteString("| node | iteration | of it compute | bridge, node-side | ÷ iteration | bytes copied, node | bridge, trainer-side | ÷ iteration | bytes copied, trainer | evaluating |\n|---|---|---|---|---|---|---|---|---|---|\n")
			rows := append([]Bridge(nil), pt.Bridges...)
			if m, ok := pt.Bridge(); ok {
				rows = append(rows, m)
			}
			for _, br := range rows {
				ts, tsh, tb := "—", "—", "—"
				if br.TrainerSide >= 0 {
					ts, tsh, tb = fmtMicros(br.TrainerSide), fmt.Sprintf("%.1f%%", 100*br.TrainerShare()), fmt.Sprintf("%.0f", br.TrainerBytes)
				}
				ev := ""
				if br.Evaluating > 0 {
					ev = fmt.Sprintf("%.1fs", br.Evaluating.Seconds())
				}
				fmt.Fprintf(&b, "| %s | %s | %s | %s | %.1f%% | %.0f | %s | %s | %s | %s |\n", br.Node, fmtMillis(br.Iteration), fmtMillis(br.Compute), fmtMicros(br.NodeSide),
					100*br.NodeShare(), br.NodeBytes, ts, tsh, tb, ev)
			}
		}
		b.WriteString("\n")
		for _, q := range r.Ratios(set) {
			fmt.Fprintf(&b, "- %s\n", q)
		}
		b.WriteString("\n")
	}
	b.WriteString("Both clocks start at process start: a mesh's when its first node process starts (forming, trainers importing torch and loading MNIST included: " +
		"the start-up column, until its first worker's first iteration; a PyTorch evaluator evaluates beside its training, the built-in one in step), DDP's when its process starts " +
		"(imports, MNIST, the process group, and rank 0's evaluations included). " +
		"Slowdowns stretch only measured compute: the nodes' --slowdown (worker.Emulate) and mnist_ddp.py's --slowdowns (a communication hook, before the allreduce).\n")
	return b.String()
}

// optimizerText names the optimizer every system runs.
func (c PyTorchConfig) optimizerText() string {
	if c.Optimizer == "adamw" {
		return fmt.Sprintf("AdamW at lr %g (weight decay 0.01)", c.LR)
	}
	return fmt.Sprintf("SGD at lr %g, momentum %g, constant", c.LR, c.Momentum)
}

func evalSamplesText(n int) string {
	if n == 0 {
		return "all 10000 test samples"
	}
	return fmt.Sprintf("the first %d test samples", n)
}

// CSV is one line per training.
func (r *PyTorchResult) CSV() string {
	var b strings.Builder
	b.WriteString("setting,system,time_to_target_s,first_iter_s,final_acc,samples_per_s,wall_s,iteration_us,bridge_node_us,bridge_node_share,bytes_node,bridge_trainer_us,bridge_trainer_share,bytes_trainer,evaluating_s,load,error\n")
	for _, run := range r.Runs {
		tt := ""
		if run.ToTarget != NotReached {
			tt = fmt.Sprintf("%.2f", run.ToTarget.Seconds())
		}
		it, bn, bns, nb, bt, bts, tb, ev := "", "", "", "", "", "", "", ""
		if m, ok := run.Bridge(); ok {
			it, bn, bns, nb = us(m.Iteration), us(m.NodeSide), fmt.Sprintf("%.4f", m.NodeShare()), fmt.Sprintf("%.0f", m.NodeBytes)
			ev = fmt.Sprintf("%.2f", m.Evaluating.Seconds())
			if m.TrainerSide >= 0 {
				bt, bts, tb = us(m.TrainerSide), fmt.Sprintf("%.4f", m.TrainerShare()), fmt.Sprintf("%.0f", m.TrainerBytes)
			}
		}
		fmt.Fprintf(&b, "%s,%s,%s,%.2f,%.4f,%.1f,%.1f,%s,%s,%s,%s,%s,%s,%s,%s,%.2f,%q\n", run.Setting, run.System, tt, run.FirstIter.Seconds(), run.FinalAcc,
			run.SamplesPerSec, run.Wall.Seconds(), it, bn, bns, nb, bt, bts, tb, ev, run.Load, run.Err)
	}
	return b.String()
}

func us(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/1e3) }

// Write saves report.md and results.csv into dir.
func (r *PyTorchResult) Write(dir string) error {
	if err := writeMarkdown(dir, "report.md", r.Markdown()); err != nil {
		return err
	}
	return writeMarkdown(dir, "results.csv", r.CSV())
}

// ddpLineEvery is how many of DDP's evaluation lines make one progress
// line.
func ddpLineEvery(verbose bool) int {
	if verbose {
		return 1
	}
	return 10
}
