package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"dsspmesh/cudaops"
	"dsspmesh/lab/netlab"
)

// BigModelConfig is one `dssp-lab bench bigmodel` run: a large model trained
// on a local mesh for a fixed time, its nodes' memory and disk measured
// against multiples of the model's bytes.
type BigModelConfig struct {
	Binary   string
	Nodes    int
	Threads  int
	Duration time.Duration
	Model    string
	Dataset  string
	// SpecArgs are further job flags for the bootstrap node.
	SpecArgs []string
	// NodeArgs are further flags for every node (--pprof, --log-level).
	NodeArgs []string
	// Dir, if set, keeps the run folder (data dirs, node logs) there.
	Dir       string
	EvalEvery time.Duration
	// RSSFactor and DiskFactor are the targets: each node's peak RSS at
	// most RSSFactor × the model's bytes, its data dir after the run at
	// most DiskFactor × them.
	RSSFactor, DiskFactor float64
	// CeilingTime > 0 first measures the compute ceiling of the job (one
	// single-threaded worker in process for this long, × the cores) and
	// the cores computing at once (one single-threaded worker per core,
	// each on its own copy of the model, for as long), and the report
	// gives the mesh's samples/s as a share of each.
	CeilingTime time.Duration
	// Link, if set, trains on the link lab's topology (one host a node):
	// first unshaped (the baseline, Baseline), then shaped (Run), each
	// for Duration.
	Link *netlab.Spec
	Out  io.Writer
}

// DefaultBigModelConfig is the setting: mlp-wide (99.6 MB) on
// synthetic-mnist, 4 nodes, 5 minutes, RSS ≤ 6× and data dir ≤ 8× the
// model's bytes. The job uses 8 shards (each slice 12.5 MB, so a push, an
// entry and a snapshot in flight are an eighth of the model; the automatic
// count would be 6) and a learning rate of 0.01 for the wide layers; the
// wire precision is the default, int8 gradients (a 3.2 MB push a shard,
// half of bf16's, which this benchmark used before: 4-7 iterations in 5
// minutes there, 23-44 with int8).
func DefaultBigModelConfig() BigModelConfig {
	return BigModelConfig{Nodes: 4, Threads: 1, Duration: 5 * time.Minute, Model: "mlp-wide", Dataset: "synthetic-mnist",
		SpecArgs: []string{"--lr", "0.01", "--shards", "8"}, EvalEvery: time.Minute, RSSFactor: 6, DiskFactor: 8}
}

// Validate names the first bad value.
func (c BigModelConfig) Validate() error {
	if err := validateNodeRun(c.Binary, c.Nodes, c.Threads, c.Duration); err != nil {
		return err
	}
	if c.EvalEvery <= 0 {
		return fmt.Errorf("--eval-every %v must be > 0", c.EvalEvery)
	}
	if c.Link != nil && c.Link.Nodes() != c.Nodes {
		return fmt.Errorf("--link: %d hosts for --nodes %d (one host a node)", c.Link.Nodes(), c.Nodes)
	}
	return nil
}

// BigModelResult is the run and the model's size.
type BigModelResult struct {
	Config     BigModelConfig
	Params     int
	ModelBytes int64
	Run        UsageRun
	// Baseline is the same job on the link lab's topology unshaped, and
	// Paths the shaped link as measured, when Config.Link is set.
	Baseline *UsageRun
	Paths    []string
	Ceiling  float64 // samples/s; 0: not measured (CeilingTime)
	// Concurrent is the samples/s of the cores computing at once (0: not
	// measured): a model that streams more than the caches hold shares
	// the memory bandwidth, so it is below Ceiling.
	Concurrent float64
}

// RunBigModel trains the model on a local mesh for Duration.
func RunBigModel(ctx context.Context, cfg BigModelConfig, log *slog.Logger) (*BigModelResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := cudaops.NewModel(cfg.Model, cudaops.ModelOptions{Workers: 1})
	if err != nil {
		return nil, err
	}
	res := &BigModelResult{Config: cfg, Params: m.NumParams(), ModelBytes: 4 * int64(m.NumParams())}
	fmt.Fprintf(out(cfg.Out), "== %s (%d parameters, %s) on %s: %d nodes for %v\n",
		cfg.Model, res.Params, mib(res.ModelBytes), cfg.Dataset, cfg.Nodes, cfg.Duration)
	spec := append([]string{"--model", cfg.Model, "--dataset", cfg.Dataset}, cfg.SpecArgs...)
	if cfg.CeilingTime > 0 {
		if res.Ceiling, err = paradigmsCeiling(ctx, spec, cfg.CeilingTime); err != nil {
			return res, fmt.Errorf("bench: compute ceiling: %w", err)
		}
		fmt.Fprintf(out(cfg.Out), "compute ceiling: %.1f samples/s (one single-threaded worker in process, %v, × the cores)\n", res.Ceiling, cfg.CeilingTime)
		if res.Concurrent, err = concurrentCeiling(ctx, spec, cfg.CeilingTime); err != nil {
			return res, fmt.Errorf("bench: the cores at once: %w", err)
		}
		fmt.Fprintf(out(cfg.Out), "the cores at once: %.1f samples/s (one single-threaded worker per core in process, each on its own model, %v)\n", res.Concurrent, cfg.CeilingTime)
	}
	uc := UsageConfig{Label: cfg.Model, Binary: cfg.Binary, Nodes: cfg.Nodes, Duration: cfg.Duration,
		NodeArgs: append([]string{"--detection", "lan", "--threads", strconv.Itoa(cfg.Threads), "--eval-every", cfg.EvalEvery.String()}, cfg.NodeArgs...),
		SpecArgs: spec, Keep: cfg.Dir, Out: cfg.Out}
	if cfg.Link == nil {
		res.Run, err = MeasureUsage(ctx, uc, log)
		return res, err
	}
	if res.Paths, err = measureLink(ctx, *cfg.Link, log); err != nil {
		return res, fmt.Errorf("bench: measuring the link: %w", err)
	}
	for _, p := range res.Paths {
		fmt.Fprintf(out(cfg.Out), "link %s: %s\n", cfg.Link, p)
	}
	for _, spec := range []netlab.Spec{cfg.Link.Unshaped(), *cfg.Link} {
		hosts, closeLab, err := onLink(ctx, &spec, log)
		if err != nil {
			return res, err
		}
		fmt.Fprintf(out(cfg.Out), "-- on %s\n", spec.Describe())
		u := uc
		u.Hosts = hosts
		if cfg.Dir != "" {
			u.Keep = filepath.Join(cfg.Dir, map[bool]string{true: "shaped", false: "unshaped"}[spec.Shaped()])
		}
		run, err := MeasureUsage(ctx, u, log)
		closeLab()
		if !spec.Shaped() {
			res.Baseline = &run
		} else {
			res.Run = run
		}
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// Markdown is the report: each node's peak RSS and data dir as multiples
// of the model's bytes, against the targets.
func (r *BigModelResult) Markdown() string {
	var b strings.Builder
	c := r.Config
	mb := float64(r.ModelBytes)
	fmt.Fprintf(&b, "## %s (%d parameters, %s) on %s, %d nodes, %v\n\n", c.Model, r.Params, mib(r.ModelBytes), c.Dataset, c.Nodes, c.Duration)
	b.WriteString("| node | peak RSS | ÷ model | data dir (peak) | data dir (after) | ÷ model |\n|---|---|---|---|---|---|\n")
	for _, u := range r.Run.Nodes {
		fmt.Fprintf(&b, "| %s | %s | %.2f | %s | %s | %.2f |\n", u.Node, mib(u.PeakRSS), float64(u.PeakRSS)/mb,
			mib(u.PeakDataDir), mib(u.DataDir), float64(u.DataDir)/mb)
	}
	fmt.Fprintf(&b, "\niterations (all workers) %d, %.2f it/s, final accuracy %.4f\n", r.Run.Iters, r.Run.ItersPerSec, r.Run.FinalAcc)
	fmt.Fprintf(&b, "samples/s %.1f, model bytes on the wire per sample %.0f", r.Run.SamplesPerSec, r.Run.BytesPerSample)
	if r.Ceiling > 0 {
		fmt.Fprintf(&b, ", mesh ÷ compute ceiling %.3f (ceiling %.1f samples/s)", r.Run.SamplesPerSec/r.Ceiling, r.Ceiling)
	}
	if r.Concurrent > 0 {
		fmt.Fprintf(&b, ", mesh ÷ the cores at once %.3f (%.1f samples/s, %.3f of the ceiling)", r.Run.SamplesPerSec/r.Concurrent, r.Concurrent, r.Concurrent/r.Ceiling)
	}
	b.WriteString("\n")
	if u := r.Baseline; u != nil {
		fmt.Fprintf(&b, "\non %s, against the same job unshaped (the baseline, run first):\n\n", c.Link.Describe())
		for _, p := range r.Paths {
			fmt.Fprintf(&b, "- measured %s\n", p)
		}
		ratio := 0.0
		if u.SamplesPerSec > 0 {
			ratio = r.Run.SamplesPerSec / u.SamplesPerSec
		}
		b.WriteString("\n| | samples/s | bytes/sample | wait share | iterations | final accuracy |\n|---|---:|---:|---|---:|---:|\n")
		fmt.Fprintf(&b, "| shaped | %.1f | %.0f | %s | %d | %.4f |\n", r.Run.SamplesPerSec, r.Run.BytesPerSample, fmtShares(r.Run.Wait), r.Run.Iters, r.Run.FinalAcc)
		fmt.Fprintf(&b, "| unshaped | %.1f | %.0f | %s | %d | %.4f |\n", u.SamplesPerSec, u.BytesPerSample, fmtShares(u.Wait), u.Iters, u.FinalAcc)
		fmt.Fprintf(&b, "\nshaped ÷ unshaped samples/s: %.2f\n", ratio)
	}
	rss, dir := float64(r.Run.PeakRSS())/mb, float64(r.Run.DataDir())/mb
	fmt.Fprintf(&b, "targets: peak RSS ≤ %.0f× model (max %.2f×): %s; data dir ≤ %.0f× model (max %.2f×): %s\n",
		c.RSSFactor, rss, verdict(rss <= c.RSSFactor), c.DiskFactor, dir, verdict(dir <= c.DiskFactor))
	return b.String()
}

// Write saves the report as dir/bigmodel.md.
func (r *BigModelResult) Write(dir string) error {
	return writeMarkdown(dir, "bigmodel.md", r.Markdown())
}
