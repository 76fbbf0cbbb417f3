package cli

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"dsspmesh/internal/python"
	"dsspmesh/lab/bench"
	"dsspmesh/lab/netlab"
	"dsspmesh/node"
)

func newBenchPyTorchCmd() *cobra.Command {
	cfg := bench.DefaultPyTorchConfig()
	var (
		systems, slowdown string
		link              string
		equal, verbose    bool
	)
	cmd := &cobra.Command{
		Use:   "pytorch",
		Short: "The PyTorch MLP through the mesh vs the built-in Go MLP vs PyTorch DDP: time to target, samples/s, the bridge's cost",
		Long: `Train the MNIST MLP (784-256-128-10), back to back on this machine, for each
setting (equal workers, and --slowdown):
  pytorch  examples/pytorch/mnist_mlp.py through a mesh of --workers
           'dssp node --trainer external' (as 'dssp up --trainer' starts it);
  go       the built-in Go MLP through the same mesh (as 'dssp up');
  ddp      examples/pytorch/mnist_ddp.py: PyTorch DistributedDataParallel over
           gloo, --workers ranks;
all with the same batch, optimizer and threads per worker — by default the
settings a DDP user picks for this model: SGD at lr 0.05 with momentum 0.9,
batch 64 a worker, a constant rate (--optimizer adamw --lr 0.001: AdamW) —
until --target test accuracy or --time-limit. Every clock starts at process
start (a mesh's first node, DDP's process) and every system evaluates every
--eval-every on --eval-samples, counted in its time. Report: time to target,
samples/s, the trainers' wait for their next compute, and the trainer
bridge's own cost per iteration (µs and bytes copied, measured by each node
and by each trainer) with the ratios mesh-PyTorch ÷ DDP time to target
(targets: ≤ 0.8 on equal workers, ≤ 0.5 with slowdowns), samples/s (at
least DDP's), wait (≤ 20 % of a round) and bridge ÷ iteration (≤ 10 %).
Mesh job flags (--job-flag), such as --local-steps, apply to both meshes.
With --link each setting runs on the link lab's topology unshaped and shaped
(root): every node, and every DDP rank, on a host of its own.

--slowdown stretches only measured compute: the nodes' --slowdown and
mnist_ddp.py's --slowdowns (a DDP communication hook, before the allreduce),
never the waiting. The Python interpreter is $DSSP_PYTHON, else the first of
python3 and /usr/bin/python3 that imports torch and numpy.

Writes into --out: report.md, results.csv, and runs/ (each mesh's own
report, the trainers' and DDP's logs). Heavy: up to 6 trainings of up to
--time-limit each; run it on an otherwise idle machine.`,
		Example: `  dssp-lab bench pytorch
  dssp-lab bench pytorch --target 0.9 --time-limit 1m --systems pytorch,ddp --equal=false
  dssp-lab bench pytorch --link two-sites --slowdown '' --job-flag=--local-steps=auto --job-flag=--wire-precision=int4
  DSSP_PYTHON=/usr/bin/python3 dssp-lab bench pytorch --slowdown '' --job-flag=--paradigm=ssp --job-flag=--s-lower=3`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := nodeBinary()
			if err != nil {
				return err
			}
			cfg.Binary = bin
			cfg.Out = cmd.OutOrStdout()
			cfg.Verbose = verbose
			cfg.Systems = nil
			for _, s := range strings.Split(systems, ",") {
				if s = strings.TrimSpace(s); s != "" {
					cfg.Systems = append(cfg.Systems, bench.System(s))
				}
			}
			cfg.Settings = nil
			if equal {
				cfg.Settings = append(cfg.Settings, bench.Setting{Name: "equal"})
			}
			if slowdown != "" {
				s, err := node.ParseFloats("slowdown", slowdown)
				if err != nil {
					return err
				}
				cfg.Settings = append(cfg.Settings, bench.Setting{Name: "mixed", Slowdown: s})
			}
			if link != "" {
				spec, err := netlab.ParseSpec(link)
				if err != nil {
					return err
				}
				cfg.Settings = bench.LinkSettings(cfg.Settings, spec)
			}
			if cfg.Python == "" {
				cfg.Python, _ = python.Find("numpy", "torch")
			}
			ctx, log, stop := benchContext(cmd, slog.LevelWarn)
			defer stop()
			res, err := bench.RunPyTorch(ctx, cfg, log)
			if res != nil {
				fmt.Fprintf(cmd.OutOrStdout(), "\n%s\nreport in %s/ (report.md, results.csv, runs/)\n", res.Markdown(), cfg.OutDir)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Workers, "workers", cfg.Workers, "nodes of each mesh and ranks of DDP")
	f.StringVar(&systems, "systems", "pytorch,go,ddp", "which trainings to run (pytorch, go, ddp), always in that order")
	f.BoolVar(&equal, "equal", true, "run the equal-workers setting (--equal=false: skip it)")
	f.StringVar(&slowdown, "slowdown", bench.FormatFloats(cfg.Settings[1].Slowdown), "per-worker compute slowdowns of the mixed setting, cycled over nodes and ranks (empty: skip it)")
	f.Float64Var(&cfg.Target, "target", cfg.Target, "test accuracy to time; each training stops there")
	f.DurationVar(&cfg.TimeLimit, "time-limit", cfg.TimeLimit, "longest training (from process start)")
	f.IntVar(&cfg.Batch, "batch", cfg.Batch, "every worker's batch (mesh job and DDP rank)")
	f.StringVar(&cfg.Optimizer, "optimizer", cfg.Optimizer, "every system's optimizer: sgd (with --momentum) or adamw (the PyTorch systems only)")
	f.Float64Var(&cfg.LR, "lr", cfg.LR, "every system's learning rate (constant)")
	f.Float64Var(&cfg.Momentum, "momentum", cfg.Momentum, "SGD's momentum, every system")
	f.DurationVar(&cfg.EvalEvery, "eval-every", cfg.EvalEvery, "every system's evaluation cadence (the resolution of their times), counted in their time")
	f.IntVar(&cfg.EvalSamples, "eval-samples", cfg.EvalSamples, "test samples per evaluation, the first ones of the test set, for meshes and DDP alike (0: all 10000); a PyTorch evaluator evaluates a copy of its model on a thread, its training going on")
	f.IntVar(&cfg.Threads, "threads", cfg.Threads, "compute threads per worker: node --threads, torch threads of each trainer and rank")
	f.DurationVar(&cfg.Poll, "poll", cfg.Poll, "how often each node's /status is polled")
	f.StringVar(&cfg.Python, "python", "", "Python interpreter with torch (default $DSSP_PYTHON, else python3 or /usr/bin/python3, the first that imports torch)")
	f.StringVar(&cfg.Examples, "examples", cfg.Examples, "folder of mnist_mlp.py and mnist_ddp.py (the repository's examples/pytorch)")
	f.StringVar(&cfg.Data, "data", "", "MNIST folder for nodes and Python (default: each finds it in the Go module cache)")
	f.StringSliceVar(&cfg.SpecArgs, "job-flag", nil, "extra job flag for both meshes, repeatable (e.g. --job-flag=--paradigm=ssp)")
	f.StringSliceVar(&cfg.NodeArgs, "node-flag", nil, "extra flag for every node process, repeatable")
	f.StringVar(&cfg.OutDir, "out", cfg.OutDir, "folder for the report")
	f.BoolVar(&verbose, "verbose", false, "show every node's progress line, not only each mesh's headline, and every DDP line")
	f.StringVar(&link, "link", "", "run every system on the link lab (root): each node and each DDP rank in a network namespace, on this topology unshaped and shaped (two-sites, switch, or keys over a preset, as bench paradigms --link)")
	return cmd
}
