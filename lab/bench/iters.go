package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"dsspmesh/cudaops"
	"dsspmesh/node/job"
	"dsspmesh/node/launch"
)

// InprocConfig is the no-network baseline: Workers goroutines, each with
// its own model (Threads goroutines per mini-batch, like a node's
// --threads), train the job's model on one shared parameter vector under a
// mutex, asynchronously (each computes on the θ it last read, then applies
// its gradient with the job's momentum step and reads θ again).
type InprocConfig struct {
	Workers  int
	Threads  int
	Spec     job.Spec // model, dataset, batch, lr, momentum
	DataDir  string   // "" = find MNIST as the node does
	Duration time.Duration
	Warmup   time.Duration
	// Independent: each worker trains its own copy of θ with its own
	// momentum (no shared vector, no lock): what the cores deliver when
	// they all compute at once, which on cores that share memory
	// bandwidth is less than one worker's rate × the cores.
	Independent bool
}

// InprocResult is the baseline's throughput.
type InprocResult struct {
	Iters       int
	ItersPerSec float64 // all workers together, after Warmup
	Params      int
}

// MeasureInproc runs the in-process baseline.
func MeasureInproc(ctx context.Context, cfg InprocConfig) (InprocResult, error) {
	var res InprocResult
	if cfg.Workers < 1 || cfg.Duration <= 0 || cfg.Threads < 0 {
		return res, fmt.Errorf("bench: in-process workers %d, threads %d, duration %v out of range", cfg.Workers, cfg.Threads, cfg.Duration)
	}
	if err := cfg.Spec.Validate(); err != nil {
		return res, err
	}
	train, _, err := cudaops.LoadDataset(cfg.Spec.Dataset, cfg.DataDir)
	if err != nil {
		return res, err
	}
	models := make([]*cudaops.Model, cfg.Workers)
	for i := range models {
		if models[i], err = cudaops.NewModel(cfg.Spec.Model, cudaops.ModelOptions{Workers: cfg.Threads}); err != nil {
			return res, err
		}
	}
	res.Params = models[0].NumParams()
	theta := models[0].Init(cfg.Spec.Seed)
	var velocity []float32 // the shared momentum (each worker has its own when Independent)
	if !cfg.Independent {
		velocity = make([]float32, len(theta))
	}
	sgd := cudaops.SGD{LR: float32(cfg.Spec.LR), Momentum: float32(cfg.Spec.Momentum)}
	var mu sync.Mutex
	var counting atomic.Bool
	var iters atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, cfg.Workers)
	end := time.Now().Add(cfg.Warmup + cfg.Duration)
	for w := range cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := models[w]
			loader, err := cudaops.NewLoader(train, cudaops.LoaderConfig{Worker: w, Workers: cfg.Workers, BatchSize: cfg.Spec.BatchSize, Seed: cfg.Spec.Seed})
			if err != nil {
				errs[w] = err
				return
			}
			x := make([]float32, cfg.Spec.BatchSize*m.InputSize())
			labels := make([]int, cfg.Spec.BatchSize)
			local := make([]float32, len(theta))
			grad := make([]float32, len(theta))
			var own []float32 // the worker's momentum when Independent
			mu.Lock()
			copy(local, theta)
			mu.Unlock()
			if cfg.Independent {
				own = make([]float32, len(theta))
			}
			for time.Now().Before(end) && ctx.Err() == nil {
				loader.Next(x, labels)
				if _, err := m.Gradient(local, x, labels, grad); err != nil {
					errs[w] = err
					return
				}
				var err error
				if cfg.Independent {
					err = sgd.Step(m.Backend(), local, grad, own)
				} else {
					mu.Lock()
					err = sgd.Step(m.Backend(), theta, grad, velocity)
					copy(local, theta)
					mu.Unlock()
				}
				if err != nil {
					errs[w] = err
					return
				}
				if counting.Load() {
					iters.Add(1)
				}
			}
		}()
	}
	select {
	case <-time.After(cfg.Warmup):
	case <-ctx.Done():
	}
	counting.Store(true)
	start := time.Now()
	wg.Wait()
	el := time.Since(start)
	for _, e := range errs {
		if e != nil {
			return res, e
		}
	}
	res.Iters = int(iters.Load())
	res.ItersPerSec = float64(res.Iters) / el.Seconds()
	return res, ctx.Err()
}

// MeshItersConfig is N real node processes training through the mesh.
type MeshItersConfig struct {
	Binary string
	// Baseline marks a binary of an earlier build: job flags its `node
	// --help` does not list are left out, so it runs its own default.
	Baseline bool
	Workers  int
	Threads  int
	Spec     job.Spec // only the paradigm and the fields that differ from node defaults travel
	Duration time.Duration
	Out      io.Writer
}

// MeshItersResult is the mesh's throughput and where its workers' time went.
type MeshItersResult struct {
	ItersPerSec float64 // all workers together, start-up excluded
	Wait        []float64
	FinalAcc    float64
	// The data path's totals over the whole run (start-up included), summed
	// over the nodes' last answers: worker iterations, the tensor bytes
	// pushed and returned, the push entry bytes replicated to followers,
	// and the Raft log writes (one fsync each). Counted is false when the
	// binary does not report them (a build before they existed).
	Iters                                 uint64
	PushBytes, ReplicatedBytes, LogWrites uint64
	Counted                               bool
	PeakRSS                               int64 // the largest node's, bytes
	DataDir                               int64 // the largest node's data dir after the run, bytes
}

// WirePerIter is the data path's bytes per worker-iteration.
func (m MeshItersResult) WirePerIter() float64 {
	return float64(m.PushBytes+m.ReplicatedBytes) / float64(max(m.Iters, 1))
}

// LogWritesPerIter is the Raft log writes (fsyncs) per worker-iteration.
func (m MeshItersResult) LogWritesPerIter() float64 {
	return float64(m.LogWrites) / float64(max(m.Iters, 1))
}

// MeasureMeshIters runs a `dssp up` mesh for Duration (no target), reads
// its throughput from the polls, and measures each node's data dir once
// the nodes have stopped.
func MeasureMeshIters(ctx context.Context, cfg MeshItersConfig, log *slog.Logger) (MeshItersResult, error) {
	var res MeshItersResult
	lc := launch.DefaultConfig()
	lc.Binary = cfg.Binary
	lc.Nodes = cfg.Workers
	lc.TargetAcc = 0
	lc.TimeLimit = cfg.Duration
	lc.NodeArgs = []string{"--detection", "lan", "--threads", strconv.Itoa(cfg.Threads), "--eval-every", "10s"}
	lc.SpecArgs = specArgs(cfg.Spec)
	if cfg.Baseline {
		lc.SpecArgs = knownFlags(cfg.Binary, lc.SpecArgs)
	}
	lc.Out = cfg.Out
	if lc.Out == nil {
		lc.Out = io.Discard
	}
	dir, err := os.MkdirTemp("", "dssp-bench-iters-*")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	lc.ReportDir = dir
	lc.Dir = filepath.Join(dir, "run")
	if err := os.Mkdir(lc.Dir, 0o700); err != nil {
		return res, err
	}
	r, err := launch.Run(ctx, lc, log)
	if err != nil {
		return res, err
	}
	for _, size := range nodeDataDirs(lc.Dir) {
		res.DataDir = max(res.DataDir, size)
	}
	res.ItersPerSec, res.Wait = rates(r.Samples)
	dataPathTotals(&res, r.Samples)
	for _, p := range r.PeakRSS {
		res.PeakRSS = max(res.PeakRSS, p)
	}
	if r.Final != nil {
		res.FinalAcc = r.Final.Accuracy
	}
	if res.ItersPerSec == 0 {
		return res, fmt.Errorf("bench: the mesh completed no measurable iterations in %v", cfg.Duration)
	}
	return res, nil
}

// dataPathTotals sums the data-path counters of each node's last answer.
func dataPathTotals(res *MeshItersResult, samples []launch.Sample) {
	last := map[int]launch.Sample{}
	for _, s := range samples {
		if s.Up {
			last[s.Node] = s
		}
	}
	for _, s := range last {
		res.Iters += s.Worker.Iter
		res.PushBytes += s.Worker.PushBytes
		res.ReplicatedBytes += s.Worker.ReplicatedBytes
		res.LogWrites += s.Worker.LogWrites
	}
	res.Counted = res.PushBytes > 0
}

// specArgs are the job flags of s that differ from the node's defaults.
func specArgs(s job.Spec) []string {
	d := job.DefaultSpec()
	var out []string
	add := func(name, mine, def string) {
		if mine != def {
			out = append(out, "--"+name, mine)
		}
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	add("model", s.Model, d.Model)
	add("dataset", s.Dataset, d.Dataset)
	add("paradigm", s.Paradigm, d.Paradigm)
	add("s-lower", strconv.FormatInt(s.SLower, 10), strconv.FormatInt(d.SLower, 10))
	add("r-max", strconv.FormatInt(s.RMax, 10), strconv.FormatInt(d.RMax, 10))
	add("optimizer", s.Optimizer, d.Optimizer)
	add("lr", f(s.LR), f(d.LR))
	add("momentum", f(s.Momentum), f(d.Momentum))
	add("batch", strconv.Itoa(s.BatchSize), strconv.Itoa(d.BatchSize))
	add("shards", strconv.Itoa(s.Shards), strconv.Itoa(d.Shards))
	add("replication", strconv.Itoa(s.Replication), strconv.Itoa(d.Replication))
	add("wire-precision", s.Precision().String(), d.Precision().String())
	add("combine", s.CombineRule(), d.CombineRule())
	return out
}

// knownFlags keeps of args (flag, value pairs) those binary's `node
// --help` lists: a baseline build runs its own default for a flag it
// does not know (--wire-precision, --combine).
func knownFlags(binary string, args []string) []string {
	help, _ := exec.Command(binary, "node", "--help").CombinedOutput()
	var out []string
	for i := 0; i+1 < len(args); i += 2 {
		if bytes.Contains(help, []byte(args[i]+" ")) {
			out = append(out, args[i], args[i+1])
		}
	}
	return out
}
