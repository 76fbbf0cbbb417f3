package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"dsspmesh/cudaops"
	"dsspmesh/node/job"
)

// MeshConfig is one `dssp-lab bench mesh` run.
type MeshConfig struct {
	Binary string // the dssp binary for the process mesh; "" skips it
	// Payload is the bytes per push for the transport and replication
	// measurements; 0 means one shard's slice of the job's model (what a
	// worker actually pushes to each shard).
	Payload     int
	Transport   time.Duration // length of the transport measurement
	Replication ReplicationConfig
	Disk        bool // replication on raftstore's disk stores in a temp folder, as a node keeps them
	GatePushes  int
	GateWorkers int
	Policies    []string // gates to cost against ASP
	Workers     int      // N for the iteration-throughput comparison
	Threads     int
	Spec        job.Spec
	MeshTime    time.Duration // how long the process mesh trains
	InprocTime  time.Duration
	// CeilingTime is how long one single-threaded worker trains in process
	// for the machine's compute ceiling (cores × its samples/s).
	CeilingTime time.Duration
	// BaselineBinary, if set, is a dssp binary of an earlier build (e.g.
	// the previous commit's, built from a git worktree): its replication
	// and process-mesh figures are measured in the same run, just before
	// this build's, and printed beside them.
	BaselineBinary string
	DataDir        string
	Out            io.Writer
}

// DefaultMeshConfig measures everything in about two and a half minutes.
func DefaultMeshConfig() MeshConfig {
	spec := job.DefaultSpec()
	spec.Paradigm = "asp"
	return MeshConfig{
		Transport: 8 * time.Second, Replication: DefaultReplicationConfig(), Disk: true,
		GatePushes: 1_000_000, GateWorkers: 4,
		Policies: []string{"bsp", "ssp:3", "dssp:3:12", "dssp-paper:3:12"},
		Workers:  4, Threads: 1, Spec: spec, MeshTime: 60 * time.Second, InprocTime: 20 * time.Second,
		CeilingTime: 10 * time.Second,
	}
}

// Validate names the first bad value.
func (c MeshConfig) Validate() error {
	switch {
	case c.Payload < 0 || c.Payload%4 != 0:
		return fmt.Errorf("--payload %d must be a multiple of 4 (0: one shard of the model)", c.Payload)
	case c.Transport <= 0:
		return fmt.Errorf("--transport-time %v must be > 0", c.Transport)
	case c.GatePushes < 1:
		return fmt.Errorf("--gate-pushes %d must be >= 1", c.GatePushes)
	case c.GateWorkers < 1:
		return fmt.Errorf("--gate-workers %d must be >= 1", c.GateWorkers)
	case c.Workers < 1 || c.Workers > 64:
		return fmt.Errorf("--workers %d outside 1..64", c.Workers)
	case c.Threads < 0:
		return fmt.Errorf("--threads %d must be >= 0", c.Threads)
	case c.MeshTime < 10*time.Second:
		return fmt.Errorf("--mesh-time %v must be >= 10s (start-up takes seconds)", c.MeshTime)
	case c.InprocTime <= 0:
		return fmt.Errorf("--inproc-time %v must be > 0", c.InprocTime)
	case c.CeilingTime <= 0:
		return fmt.Errorf("--ceiling-time %v must be > 0", c.CeilingTime)
	}
	r := c.Replication
	r.Payload = max(c.Payload, 4)
	if err := r.Validate(); err != nil {
		return err
	}
	return c.Spec.Validate()
}

// MeshResult is every measurement with its baseline.
type MeshResult struct {
	Config MeshConfig
	CPU    string
	Cores  int
	// Shards is the job's shard count on this build (--shards 0 resolved
	// for the model); a baseline binary resolves its own default.
	Shards      int
	Transport   TransportResult
	Replication ReplicationResult
	Gate        []GateCost
	Mesh        *MeshItersResult // nil when skipped
	Inproc      InprocResult
	// Ceiling is one worker with one compute thread in process, no
	// network: cores × its samples/s is the machine's compute ceiling.
	Ceiling InprocResult
	// BaselineReplication and BaselineMesh are BaselineBinary's figures
	// (nil without one).
	BaselineReplication *ReplicationResult
	BaselineMesh        *MeshItersResult
	Start               time.Time
	Took                time.Duration
	// LoadStart and LoadEnd are the machine's 1-minute load average
	// before and after (0 where unknown).
	LoadStart, LoadEnd float64
}

// RunMesh runs the measurements in turn, printing each as it completes.
func RunMesh(ctx context.Context, cfg MeshConfig, log *slog.Logger) (*MeshResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	out := cfg.Out
	if out == nil {
		out = io.Discard
	}
	res := &MeshResult{Config: cfg, CPU: CPUModel(), Cores: runtime.NumCPU(), Start: time.Now(), LoadStart: LoadAverage()}
	m, err := cudaops.NewModel(cfg.Spec.Model, cudaops.ModelOptions{Workers: 1})
	if err != nil {
		return nil, err
	}
	res.Shards = cfg.Spec.WithShards(m.NumParams()).Shards
	if cfg.Payload == 0 {
		cfg.Payload = (m.NumParams() + res.Shards - 1) / res.Shards * 4
		res.Config.Payload = cfg.Payload
	}
	fmt.Fprintf(out, "transport: %d-byte round trips, mesh QUIC vs raw quic-go, %v...\n", cfg.Payload, cfg.Transport)
	if res.Transport, err = MeasureTransport(ctx, cfg.Payload, cfg.Transport, log); err != nil {
		return res, err
	}
	fmt.Fprintf(out, "  raw %.1f MiB/s, mesh %.1f MiB/s, ratio %.2f\n", res.Transport.RawMiBs, res.Transport.MeshMiBs, res.Transport.Ratio)

	rc := cfg.Replication
	rc.Payload = cfg.Payload
	rc.Precision = cfg.Spec.Precision()
	if cfg.Disk {
		dir, err := os.MkdirTemp("", "dssp-bench-raft-*")
		if err != nil {
			return res, err
		}
		defer os.RemoveAll(dir)
		rc.Dir = dir
	}
	res.Replication.Config = rc
	if cfg.BaselineBinary != "" {
		fmt.Fprintf(out, "replication, baseline build %s...\n", cfg.BaselineBinary)
		b, err := MeasureBaselineReplication(ctx, cfg.BaselineBinary, rc)
		if err != nil {
			return res, err
		}
		res.BaselineReplication = &b
		for _, r := range append([]PushRate{b.Baseline}, b.Rates...) {
			fmt.Fprintf(out, "  baseline %s: %.0f pushes/s\n", replicaName(r.Replicas), r.PushesPerSec)
		}
	}
	fmt.Fprintf(out, "replication: %d workers pushing %d bytes (%s on the wire: %d) under ASP, unreplicated echo then %v replicas, %v each...\n",
		rc.Workers, rc.Payload, rc.Precision, rc.Precision.Bytes(rc.Payload/4), rc.Replicas, rc.Duration)
	if res.Replication, err = MeasureReplication(ctx, rc, log); err != nil {
		return res, err
	}
	for _, r := range append([]PushRate{res.Replication.Baseline}, res.Replication.Rates...) {
		fmt.Fprintf(out, "  %s: %.0f pushes/s, %.1f MiB/s\n", replicaName(r.Replicas), r.PushesPerSec, r.MiBs)
	}

	fmt.Fprintf(out, "gate: %d pushes of %d simulated workers (slowdown 1,1,2,4) per policy...\n", cfg.GatePushes, cfg.GateWorkers)
	if res.Gate, err = MeasureGate(cfg.Policies, cfg.GateWorkers, cfg.GatePushes, []float64{1, 1, 2, 4}); err != nil {
		return res, err
	}
	for _, g := range res.Gate {
		fmt.Fprintf(out, "  %s: %.0f ns/push (x%.2f ASP)\n", g.Policy, g.NsPerOp, g.XASP)
	}

	fmt.Fprintf(out, "in-process baseline: %d workers training %s on a shared parameter vector, %v...\n", cfg.Workers, cfg.Spec.Model, cfg.InprocTime)
	if res.Inproc, err = MeasureInproc(ctx, InprocConfig{Workers: cfg.Workers, Threads: cfg.Threads, Spec: cfg.Spec,
		DataDir: cfg.DataDir, Duration: cfg.InprocTime, Warmup: 2 * time.Second}); err != nil {
		return res, err
	}
	fmt.Fprintf(out, "  %.1f iterations/s\n", res.Inproc.ItersPerSec)
	fmt.Fprintf(out, "compute ceiling: one single-threaded worker in process, %v, × %d cores...\n", cfg.CeilingTime, res.Cores)
	if res.Ceiling, err = measureCeiling(ctx, cfg.Spec, cfg.DataDir, cfg.CeilingTime); err != nil {
		return res, err
	}
	fmt.Fprintf(out, "  %.0f samples/s single-threaded, ceiling %.0f samples/s\n", res.CeilingSamples()/float64(res.Cores), res.CeilingSamples())
	if cfg.Binary != "" && cfg.BaselineBinary != "" {
		fmt.Fprintf(out, "mesh, baseline build: %d node processes training %s under %s for %v...\n", cfg.Workers, cfg.Spec.Model, cfg.Spec.PolicyText(), cfg.MeshTime)
		m, err := MeasureMeshIters(ctx, MeshItersConfig{Binary: cfg.BaselineBinary, Baseline: true, Workers: cfg.Workers, Threads: cfg.Threads,
			Spec: cfg.Spec, Duration: cfg.MeshTime, Out: &prefixWriter{w: out, prefix: "  "}}, log)
		if err != nil {
			return res, err
		}
		res.BaselineMesh = &m
		fmt.Fprintf(out, "  %.1f iterations/s, %.2f of the ceiling, wait %s\n", m.ItersPerSec, res.OfCeiling(m), fmtShares(m.Wait))
	}
	if cfg.Binary != "" {
		fmt.Fprintf(out, "mesh: %d node processes training %s under %s for %v...\n", cfg.Workers, cfg.Spec.Model, cfg.Spec.PolicyText(), cfg.MeshTime)
		m, err := MeasureMeshIters(ctx, MeshItersConfig{Binary: cfg.Binary, Workers: cfg.Workers, Threads: cfg.Threads,
			Spec: cfg.Spec, Duration: cfg.MeshTime, Out: &prefixWriter{w: out, prefix: "  "}}, log)
		if err != nil {
			return res, err
		}
		res.Mesh = &m
		fmt.Fprintf(out, "  %.1f iterations/s, %.2f of the ceiling, wait %s\n", m.ItersPerSec, res.OfCeiling(m), fmtShares(m.Wait))
	}
	res.Took = time.Since(res.Start)
	res.LoadEnd = LoadAverage()
	return res, ctx.Err()
}

// CeilingSamples is the machine's compute ceiling: cores × the samples/s
// of one single-threaded worker with no network.
func (r *MeshResult) CeilingSamples() float64 {
	return ceilingSamples(r.Cores, r.Ceiling, r.Config.Spec.BatchSize)
}

// measureCeiling runs the compute ceiling's worker: one worker with one
// compute thread in process, no network, for d.
func measureCeiling(ctx context.Context, spec job.Spec, dataDir string, d time.Duration) (InprocResult, error) {
	return MeasureInproc(ctx, InprocConfig{Workers: 1, Threads: 1, Spec: spec, DataDir: dataDir, Duration: d, Warmup: 2 * time.Second})
}

// measureConcurrent is the cores computing at once: one single-threaded
// worker per core in process, each training its own copy of the model,
// after a 2-s warm-up, for d.
func measureConcurrent(ctx context.Context, spec job.Spec, d time.Duration) (InprocResult, error) {
	return MeasureInproc(ctx, InprocConfig{Workers: runtime.NumCPU(), Threads: 1, Independent: true, Spec: spec, Duration: d, Warmup: 2 * time.Second})
}

// ceilingSamples is the compute ceiling in samples/s: cores × the samples/s
// of measureCeiling's worker r at batch samples an iteration.
func ceilingSamples(cores int, r InprocResult, batch int) float64 {
	return float64(cores) * r.ItersPerSec * float64(batch)
}

// OfCeiling is a mesh's samples/s over the compute ceiling.
func (r *MeshResult) OfCeiling(m MeshItersResult) float64 {
	if c := r.CeilingSamples(); c > 0 {
		return m.ItersPerSec * float64(r.Config.Spec.BatchSize) / c
	}
	return 0
}

// modelBytes is the job's model in fp32.
func (r *MeshResult) modelBytes() float64 {
	return 4 * float64(r.Inproc.Params)
}

func replicaName(n int) string {
	switch n {
	case 0:
		return "unreplicated echo"
	case 1:
		return "1 replica"
	}
	return fmt.Sprintf("%d replicas", n)
}

// Markdown renders the tables, every figure next to its baseline.
func (r *MeshResult) Markdown() string {
	var b strings.Builder
	cfg := r.Config
	fmt.Fprintf(&b, "%s, %d cores; started %s, took %s; 1-minute load average %.1f before, %.1f after. Payload %d bytes (%.0f KiB) per push.\n\n",
		r.CPU, r.Cores, r.Start.Format(time.DateTime), r.Took.Round(time.Second), r.LoadStart, r.LoadEnd, cfg.Payload, float64(cfg.Payload)/1024)

	t := r.Transport
	b.WriteString("#### Transport: push-sized round trips, one stream, alternated\n\n")
	b.WriteString("| path | MiB/s | round trip | ratio to raw |\n|---|---:|---:|---:|\n")
	fmt.Fprintf(&b, "| raw quic-go, same TLS and windows (baseline) | %.1f | %s | 1.00 |\n", t.RawMiBs, t.RawRTT.Round(time.Microsecond))
	fmt.Fprintf(&b, "| mesh.QUICTransport frames | %.1f | %s | %.2f |\n\n", t.MeshMiBs, t.MeshRTT.Round(time.Microsecond), t.Ratio)

	rp := r.Replication
	stores := "in-memory Raft stores"
	if rp.Config.Dir != "" {
		stores = "bbolt stores on disk"
	}
	fmt.Fprintf(&b, "#### Replicated pushes: %d workers, ASP, over QUIC, %s\n\n", rp.Config.Workers, stores)
	b.WriteString("| path | pushes/s | MiB/s | pushes per Raft entry | ratio to unreplicated |\n|---|---:|---:|---:|---:|\n")
	fmt.Fprintf(&b, "| unreplicated echo (baseline) | %.0f | %.1f | — | 1.00 |\n", rp.Baseline.PushesPerSec, rp.Baseline.MiBs)
	for _, x := range rp.Rates {
		fmt.Fprintf(&b, "| shard, %s | %.0f | %.1f | %.1f | %.2f |\n", replicaName(x.Replicas), x.PushesPerSec, x.MiBs, x.PushesPerEntr, x.Ratio)
	}
	b.WriteString("\n")

	b.WriteString("#### Gate: cost per push (simulated time, 4 workers at 1,1,2,4)\n\n")
	var slowest float64
	for _, x := range rp.Rates {
		if slowest == 0 || x.PushesPerSec < slowest {
			slowest = x.PushesPerSec
		}
	}
	b.WriteString("| policy | ns/push | ratio to ASP | share of one replicated push | held | controller runs |\n|---|---:|---:|---:|---:|---:|\n")
	for _, g := range r.Gate {
		share := "—"
		if slowest > 0 {
			// One push's service time at the replicated shard: 1/pushes·s.
			share = fmt.Sprintf("%.4f%%", 100*g.NsPerOp/(1e9/slowest))
		}
		base := ""
		if g.Policy == "asp" {
			base = " (baseline)"
		}
		fmt.Fprintf(&b, "| %s%s | %.0f | %.2f | %s | %d | %d |\n", g.Policy, base, g.NsPerOp, g.XASP, share, g.Held, g.Controls)
	}
	b.WriteString("\n")

	fmt.Fprintf(&b, "#### Iteration throughput: %d workers, %s, batch %d\n\n", cfg.Workers, cfg.Spec.Model, cfg.Spec.BatchSize)
	b.WriteString("| path | iterations/s (all workers) | wait share per worker | ratio to in-process |\n|---|---:|---|---:|\n")
	fmt.Fprintf(&b, "| %d goroutines, shared in-process parameters, no network (baseline) | %.1f | — | 1.00 |\n", cfg.Workers, r.Inproc.ItersPerSec)
	if r.Mesh != nil {
		fmt.Fprintf(&b, "| %d `dssp node` processes, %s, %d shards × %d replicas | %.1f | %s | %.2f |\n", cfg.Workers, cfg.Spec.PolicyText(),
			r.Shards, cfg.Spec.Replication, r.Mesh.ItersPerSec, fmtShares(r.Mesh.Wait), r.Mesh.ItersPerSec/r.Inproc.ItersPerSec)
	} else {
		b.WriteString("| process mesh | not run | | |\n")
	}
	b.WriteString("\n")
	b.WriteString(r.dataPathMarkdown())
	return b.String()
}

// dataPathMarkdown is the issue-12 figures of this build beside the
// baseline build's, where one was measured.
func (r *MeshResult) dataPathMarkdown() string {
	var b strings.Builder
	cfg := r.Config
	fmt.Fprintf(&b, "#### Data path: %d workers, %s, %s on the wire (this build), ceiling %.0f samples/s (%d cores × one single-threaded in-process worker)\n\n",
		cfg.Workers, cfg.Spec.PolicyText(), cfg.Spec.Precision(), r.CeilingSamples(), r.Cores)
	b.WriteString("| figure | baseline build | this build | target |\n|---|---:|---:|---:|\n")
	dash := "—"
	mesh := func(m *MeshItersResult, f func(MeshItersResult) string) string {
		if m == nil {
			return dash
		}
		return f(*m)
	}
	counted := func(m *MeshItersResult, f func(MeshItersResult) string) string {
		if m == nil || !m.Counted {
			return dash
		}
		return f(*m)
	}
	row := func(name string, base, now string, target string) {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", name, base, now, target)
	}
	row("mesh samples/s", mesh(r.BaselineMesh, func(m MeshItersResult) string { return fmt.Sprintf("%.0f", m.ItersPerSec*float64(cfg.Spec.BatchSize)) }),
		mesh(r.Mesh, func(m MeshItersResult) string { return fmt.Sprintf("%.0f", m.ItersPerSec*float64(cfg.Spec.BatchSize)) }), "")
	row("mesh samples/s ÷ compute ceiling", mesh(r.BaselineMesh, func(m MeshItersResult) string { return fmt.Sprintf("%.3f", r.OfCeiling(m)) }),
		mesh(r.Mesh, func(m MeshItersResult) string { return fmt.Sprintf("%.3f", r.OfCeiling(m)) }), "≥ 0.3")
	row("wait share per worker", mesh(r.BaselineMesh, func(m MeshItersResult) string { return fmtShares(m.Wait) }),
		mesh(r.Mesh, func(m MeshItersResult) string { return fmtShares(m.Wait) }), "")
	perModel := func(m MeshItersResult) string {
		return fmt.Sprintf("%.2f (%.0f KiB)", m.WirePerIter()/r.modelBytes(), m.WirePerIter()/1024)
	}
	row("data-path tensor bytes per worker-iteration ÷ model bytes (fp32)", counted(r.BaselineMesh, perModel), counted(r.Mesh, perModel), "")
	row("Raft log writes (fsyncs) per worker-iteration, all replicas", counted(r.BaselineMesh, func(m MeshItersResult) string { return fmt.Sprintf("%.2f", m.LogWritesPerIter()) }),
		counted(r.Mesh, func(m MeshItersResult) string { return fmt.Sprintf("%.2f", m.LogWritesPerIter()) }), "")
	rss := func(m MeshItersResult) string { return fmt.Sprintf("%.0f MiB", float64(m.PeakRSS)/(1<<20)) }
	row("peak RSS, largest node", mesh(r.BaselineMesh, rss), mesh(r.Mesh, rss), "≤ 200 MiB")
	disk := func(m MeshItersResult) string { return fmt.Sprintf("%.1f MiB", float64(m.DataDir)/(1<<20)) }
	row("data dir after the run, largest node", mesh(r.BaselineMesh, disk), mesh(r.Mesh, disk), "≤ 64 MiB")
	repl := func(rr *ReplicationResult) string {
		if rr == nil {
			return dash
		}
		for _, x := range rr.Rates {
			if x.Replicas == 3 {
				return fmt.Sprintf("%.2f (%.0f/s of %.0f/s)", x.PushesPerSec/rr.Baseline.PushesPerSec, x.PushesPerSec, rr.Baseline.PushesPerSec)
			}
		}
		return dash
	}
	row("3-replica pushes ÷ unreplicated fp32 echo", repl(r.BaselineReplication), repl(&r.Replication), "≥ 0.5")
	b.WriteString("\nTensor bytes: gradients pushed + parameter slices returned + push entries × followers (headers, QUIC and Raft heartbeats excluded). ")
	b.WriteString("Log writes: each replica's raft log appends (one bbolt transaction, fsynced), summed over the mesh. Totals over the whole run, start-up included.\n")
	return b.String()
}

// Write puts the markdown into dir/mesh.md.
func (r *MeshResult) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, "mesh.md"), []byte(r.Markdown()), 0o644)
}

// CPUModel is the "model name" of /proc/cpuinfo, or GOARCH where there is
// none.
func CPUModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				return strings.TrimSpace(v)
			}
		}
	}
	return runtime.GOARCH
}
