package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"dsspmesh/node/launch"
)

// UsageRun is one local mesh of one binary, run for a fixed time, with
// what each node held.
type UsageRun struct {
	Label       string
	Binary      string
	Nodes       []NodeUsage
	ItersPerSec float64 // all workers together, start-up excluded
	Iters       uint64  // iterations all workers completed
	// SamplesPerSec and BytesPerSample are RunSummary's (throughput).
	SamplesPerSec, BytesPerSample float64
	FinalAcc                      float64
	Elapsed                       time.Duration
	// Wait is each worker's share of its time spent pushing and held by
	// the gates, at the end (RunSummary's).
	Wait []float64
}

// PeakRSS, PeakDataDir and DataDir are the largest over the run's nodes.
func (r UsageRun) PeakRSS() int64     { v, _, _ := maxUsage(r.Nodes); return v }
func (r UsageRun) PeakDataDir() int64 { _, v, _ := maxUsage(r.Nodes); return v }
func (r UsageRun) DataDir() int64     { _, _, v := maxUsage(r.Nodes); return v }

// UsageConfig is one run measured by MeasureUsage.
type UsageConfig struct {
	Label    string
	Binary   string
	Nodes    int
	Duration time.Duration
	NodeArgs []string // every node (after the launcher's own)
	SpecArgs []string // the bootstrap node's job flags
	// Keep, if set, is the folder for the run's data dirs, logs and
	// report, left in place afterwards (node logs to read, profiles);
	// "" = a temporary folder removed at the end.
	Keep string
	Out  io.Writer
	// Hosts places the nodes on the link lab's hosts (launch.Config.Hosts);
	// nil: loopback.
	Hosts []launch.Host
}

// MeasureUsage runs a `dssp up` mesh of cfg.Binary for cfg.Duration with
// no accuracy target, polling every node's peak RSS and data dir each
// second, and measures the data dirs again once the nodes have stopped.
func MeasureUsage(ctx context.Context, cfg UsageConfig, log *slog.Logger) (UsageRun, error) {
	res := UsageRun{Label: cfg.Label, Binary: cfg.Binary}
	dir := cfg.Keep
	if dir == "" {
		tmp, err := os.MkdirTemp("", "dssp-bench-usage-*")
		if err != nil {
			return res, err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return res, err
	}
	lc := launch.DefaultConfig()
	lc.Binary = cfg.Binary
	lc.Nodes = cfg.Nodes
	lc.Dir = dir + "/run"
	lc.ReportDir = dir + "/report"
	lc.TargetAcc = 0
	lc.TimeLimit = cfg.Duration
	lc.NodeArgs = cfg.NodeArgs
	lc.SpecArgs = cfg.SpecArgs
	lc.Hosts = cfg.Hosts
	lc.Out = cfg.Out
	if lc.Out == nil {
		lc.Out = io.Discard
	}
	if err := os.MkdirAll(lc.Dir, 0o700); err != nil {
		return res, err
	}
	w := watchUsage(lc.Dir, time.Second)
	r, err := launch.Run(ctx, lc, log)
	res.Nodes = w.finish()
	if err != nil {
		return res, fmt.Errorf("bench: %s mesh: %w", cfg.Label, err)
	}
	res.Elapsed = r.Elapsed
	res.ItersPerSec, res.Wait = rates(r.Samples)
	res.SamplesPerSec, res.BytesPerSample, _ = throughput(r.Samples)
	last := map[int]uint64{}
	for _, s := range r.Samples {
		if s.Up {
			last[s.Node] = s.Worker.Iter
		}
	}
	for _, it := range last {
		res.Iters += it
	}
	if r.Final != nil {
		res.FinalAcc = r.Final.Accuracy
	}
	if res.Iters == 0 {
		return res, fmt.Errorf("bench: the %s mesh completed no iteration in %v", cfg.Label, cfg.Duration)
	}
	return res, nil
}

// MemoryConfig is one `dssp-lab bench memory` run: the default mesh (or the
// job SpecArgs name) of this build and, when Baseline is set, of a
// baseline build, each for Duration, back to back.
type MemoryConfig struct {
	Binary   string
	Baseline string // another dssp binary (e.g. built from a git worktree of an older commit); "" = none
	Nodes    int
	Threads  int
	Duration time.Duration
	SpecArgs []string
	// Targets the report checks each run against (0 = none).
	TargetRSS     int64
	TargetDataDir int64
	Out           io.Writer
}

// DefaultMemoryConfig is the setting: the default 4-node MLP mesh
// for 75 s, against 200 MiB of peak RSS and 64 MiB of data dir per node.
func DefaultMemoryConfig() MemoryConfig {
	return MemoryConfig{Nodes: 4, Threads: 1, Duration: 75 * time.Second, TargetRSS: 200 << 20, TargetDataDir: 64 << 20}
}

// Validate names the first bad value.
func (c MemoryConfig) Validate() error {
	if err := validateNodeRun(c.Binary, c.Nodes, c.Threads, c.Duration); err != nil {
		return err
	}
	if c.Baseline != "" {
		if _, err := os.Stat(c.Baseline); err != nil {
			return fmt.Errorf("--baseline: %w", err)
		}
	}
	return nil
}

// MemoryResult is this build's run and the baseline's.
type MemoryResult struct {
	Config MemoryConfig
	Runs   []UsageRun // this build first, then the baseline if any
}

// RunMemory measures the baseline (if any) and then this build.
func RunMemory(ctx context.Context, cfg MemoryConfig, log *slog.Logger) (*MemoryResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	res := &MemoryResult{Config: cfg}
	nodeArgs := []string{"--detection", "lan", "--threads", strconv.Itoa(cfg.Threads), "--eval-every", "10s"}
	one := func(label, bin string) (UsageRun, error) {
		fmt.Fprintf(out(cfg.Out), "== %s (%s): %d nodes for %v\n", label, bin, cfg.Nodes, cfg.Duration)
		r, err := MeasureUsage(ctx, UsageConfig{Label: label, Binary: bin, Nodes: cfg.Nodes, Duration: cfg.Duration,
			NodeArgs: nodeArgs, SpecArgs: cfg.SpecArgs}, log)
		fmt.Fprintf(out(cfg.Out), "   peak RSS %s, data dir %s (peak %s), %.1f it/s\n",
			mib(r.PeakRSS()), mib(r.DataDir()), mib(r.PeakDataDir()), r.ItersPerSec)
		return r, err
	}
	var base *UsageRun
	if cfg.Baseline != "" {
		b, err := one("baseline", cfg.Baseline)
		if err != nil {
			return res, err
		}
		base = &b
	}
	cur, err := one("this build", cfg.Binary)
	if err != nil {
		return res, err
	}
	res.Runs = append(res.Runs, cur)
	if base != nil {
		res.Runs = append(res.Runs, *base)
	}
	return res, nil
}

func out(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// Markdown is the report: per node and per run, with the targets.
func (r *MemoryResult) Markdown() string {
	var b strings.Builder
	c := r.Config
	fmt.Fprintf(&b, "## Memory and disk per node (%d nodes, %v, job %s)\n\n", c.Nodes, c.Duration, jobLabel(c.SpecArgs))
	b.WriteString("| run | node | peak RSS | data dir (peak) | data dir (after) |\n|---|---|---|---|---|\n")
	for _, run := range r.Runs {
		for _, u := range run.Nodes {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", run.Label, u.Node, mib(u.PeakRSS), mib(u.PeakDataDir), mib(u.DataDir))
		}
	}
	b.WriteString("\n| run | max peak RSS | max data dir after | it/s (all workers) | final acc |\n|---|---|---|---|---|\n")
	for _, run := range r.Runs {
		fmt.Fprintf(&b, "| %s | %s | %s | %.1f | %.4f |\n", run.Label, mib(run.PeakRSS()), mib(run.DataDir()), run.ItersPerSec, run.FinalAcc)
	}
	if len(r.Runs) == 2 {
		cur, base := r.Runs[0], r.Runs[1]
		fmt.Fprintf(&b, "\nthis build ÷ baseline: peak RSS %s, data dir %s, it/s %s\n",
			ratio(float64(cur.PeakRSS()), float64(base.PeakRSS())), ratio(float64(cur.DataDir()), float64(base.DataDir())),
			ratio(cur.ItersPerSec, base.ItersPerSec))
	}
	if len(r.Runs) > 0 && (c.TargetRSS > 0 || c.TargetDataDir > 0) {
		cur := r.Runs[0]
		fmt.Fprintf(&b, "targets: peak RSS ≤ %s: %s; data dir ≤ %s: %s\n",
			mib(c.TargetRSS), verdict(cur.PeakRSS() <= c.TargetRSS), mib(c.TargetDataDir), verdict(cur.DataDir() <= c.TargetDataDir))
	}
	return b.String()
}

// Write saves the report as dir/memory.md.
func (r *MemoryResult) Write(dir string) error {
	return writeMarkdown(dir, "memory.md", r.Markdown())
}

func ratio(a, b float64) string {
	if b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", a/b)
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

func jobLabel(specArgs []string) string {
	if len(specArgs) == 0 {
		return "defaults"
	}
	return strings.Join(specArgs, " ")
}

func writeMarkdown(dir, name, md string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, name), []byte(md), 0o644)
}

// validateNodeRun checks what every benchmark that starts --nodes 'dssp node'
// processes for --time needs, naming the first bad value.
func validateNodeRun(binary string, nodes, threads int, d time.Duration) error {
	switch {
	case binary == "":
		return errors.New("bench: no dssp binary to start")
	case nodes < 1 || nodes > 64:
		return fmt.Errorf("--nodes %d outside 1..64", nodes)
	case threads < 0:
		return fmt.Errorf("--threads %d must be >= 0", threads)
	case d < 15*time.Second:
		return fmt.Errorf("--time %v must be >= 15s (start-up takes seconds)", d)
	}
	return nil
}
