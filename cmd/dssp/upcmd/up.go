package upcmd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"dsspmesh/node"
	"dsspmesh/node/job"
	"dsspmesh/node/launch"
)

// Place, called once the flags are checked and before any node starts,
// may place the run's nodes (cfg.Hosts, cfg.Nodes); release, never nil
// when err is nil, undoes what it set up once the run has ended.
type Place func(ctx context.Context, cmd *cobra.Command, cfg *launch.Config, log *slog.Logger) (release func(), err error)

// New is `dssp up`; place, if not nil, places the nodes (the lab's link
// lab), else they run on loopback.
func New(place Place) *cobra.Command {
	cfg := launch.DefaultConfig()
	spec := job.DefaultSpec()
	var (
		slowdown, detection string
		threads             int
		evalEvery           string
		computeDelay        time.Duration
	)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start a local mesh of N real node processes, show progress, and write a report",
		Long: `Start N real 'dssp node' processes of this binary on loopback (free ports, a
generated mesh key, temporary data dirs unless --dir), show per-worker progress,
stop when the mesh's test accuracy reaches --target-acc or after --time-limit,
and write --report: workers.csv, accuracy.csv (and chaos.csv), the plots
accuracy.png and clocks.png, and model.safetensors: the parameters behind
the last accuracy the mesh reported (dssp eval --model reproduces it). The job flags go to the first node, which
bootstraps the mesh; the others join it by seed and adopt its job.

--chaos K kills a random non-bootstrap node with SIGKILL every K, restarts it
--chaos-down later on the same data dir, and reports how long the mesh took to
recover and the node to rejoin.`,
		Example: `  dssp up
  dssp up --nodes 4 --paradigm dssp --s-lower 3 --r-max 12 --slowdown 1,1,1,3 --target-acc 0.97
  dssp up --nodes 4 --chaos 30s --time-limit 5m
  dssp up --nodes 32 --workers 4 --target-acc 0 --time-limit 2m
  dssp up --nodes 3 --trainer 'python3 examples/pytorch/mnist_mlp.py' --target-acc 0.95`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := os.Executable()
			if err != nil {
				return fmt.Errorf("up: cannot find this binary to start nodes: %w", err)
			}
			cfg.Binary = bin
			cfg.Out = cmd.OutOrStdout()
			if slowdown != "" {
				if cfg.Slowdown, err = node.ParseFloats("slowdown", slowdown); err != nil {
					return err
				}
			}
			if err := spec.Validate(); err != nil {
				return err
			}
			// Refused here, before any node starts: a NaN target that no
			// accuracy reaches, a momentum float32 rounds to 1, a report
			// folder that would fail only after the run.
			if err := job.CheckFloat("target-acc", cfg.TargetAcc, 0, 1, false); err != nil {
				return err
			}
			if err := job.CheckMomentum(spec.Momentum); err != nil {
				return err
			}
			if err := checkWritableDir("report", cfg.ReportDir); err != nil {
				return err
			}
			// Only the flags the user set travel to the bootstrap node;
			// the node's defaults are the same as ours.
			cmd.Flags().Visit(func(f *pflag.Flag) {
				if isSpecFlag(f.Name) {
					cfg.SpecArgs = append(cfg.SpecArgs, "--"+f.Name+"="+f.Value.String()) // one word: a bool flag takes no separate value
				}
			})
			cfg.NodeArgs = []string{"--detection", detection, "--threads", strconv.Itoa(threads), "--eval-every", evalEvery}
			if cfg.Trainer != "" {
				// One trainer process per training node: the nodes compute
				// through it, and the job's model is the trainers' unless a
				// --model was given.
				cfg.NodeArgs = append(cfg.NodeArgs, "--trainer", node.TrainerExternal)
				if !cmd.Flags().Changed("model") {
					cfg.SpecArgs = append(cfg.SpecArgs, "--model="+job.ExternalModel)
				}
			}
			if computeDelay > 0 {
				cfg.NodeArgs = append(cfg.NodeArgs, "--compute-delay", computeDelay.String())
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			if place != nil {
				release, err := place(ctx, cmd, &cfg, log)
				if err != nil {
					return err
				}
				defer release()
			}
			res, err := launch.Run(ctx, cfg, log)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			for _, line := range res.Summary() {
				fmt.Fprintln(out, "chaos:", line)
			}
			fmt.Fprintln(out, "peak resident memory per node:")
			for _, line := range res.PeakRSSLines() {
				fmt.Fprintln(out, " ", line)
			}
			fmt.Fprintf(out, "wall time %s; report in %s/ (workers.csv, accuracy.csv, accuracy.png, clocks.png, model.safetensors)\n", res.Elapsed.Round(100*time.Millisecond), res.ReportDir)
			if mm := res.ModelMeta; mm != nil {
				fmt.Fprintf(out, "model %s: %s at clock %d (%s)", res.Model, mm.Model, mm.Clock, mm.Source)
				if mm.Eval != nil {
					fmt.Fprintf(out, ", test accuracy %.2f%% on %d samples as the mesh reported it", 100*mm.Eval.Accuracy, mm.Eval.Samples)
				}
				if mm.Model == job.ExternalModel {
					names := 0
					for _, l := range mm.Layers {
						names += 1 + len(l.Aliases)
					}
					fmt.Fprintf(out, "; it holds the %d state_dict entries the trainers declared (%d tensors, tied ones under each name) in their dtypes: "+
						"model.load_state_dict(dsspmesh.load_state_dict(%q))\n", names, len(mm.Layers), res.Model)
				} else {
					fmt.Fprintf(out, "; check it with: %s eval --model %s\n", selfCommand(bin), res.Model)
				}
			} else {
				fmt.Fprintln(out, "model: no node answered; no model.safetensors written")
			}
			if res.Interrupted {
				return errors.New("up: interrupted")
			}
			if cfg.TargetAcc > 0 && !res.Reached {
				return fmt.Errorf("up: target accuracy %.2f%% not reached", 100*cfg.TargetAcc)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "node processes to start")
	f.StringVar(&cfg.Trainer, "trainer", "", "a trainer command (run with sh -c) started beside every training node, e.g. 'python3 examples/pytorch/mnist_mlp.py': env DSSP_TRAINER_SOCKET names its node's socket (DSSP_NODE_INDEX, DSSP_DATA too), output in the run folder's trainer<i>.log; implies --trainer external on the nodes and --model external unless --model is given")
	f.IntVar(&cfg.Workers, "workers", launch.AutoWorkers, "how many of the nodes train (the first ones); the rest only host shards and load no dataset (0: every node; -1: every node if this machine's available memory holds them, else as many as it does)")
	f.StringVar(&cfg.Dir, "dir", "", "run folder for data dirs, logs and the mesh key (default: a temporary folder, removed at the end unless the run fails, is interrupted or misses its target)")
	f.StringVar(&cfg.ReportDir, "report", cfg.ReportDir, "folder for the CSV files and PNG plots")
	f.StringVar(&slowdown, "slowdown", "", "per-node compute slowdown factors, cycled (1,1,1,3: the 4th node is 3x slower)")
	f.Float64Var(&cfg.TargetAcc, "target-acc", cfg.TargetAcc, "stop when the mesh's test accuracy reaches this (0: run until --time-limit)")
	f.DurationVar(&cfg.TimeLimit, "time-limit", cfg.TimeLimit, "stop after this long")
	f.DurationVar(&cfg.Chaos, "chaos", 0, "kill a random non-bootstrap node with SIGKILL this often (0: never)")
	f.DurationVar(&cfg.ChaosDown, "chaos-down", cfg.ChaosDown, "restart a killed node after this long")
	f.DurationVar(&cfg.Poll, "poll", cfg.Poll, "how often each node's /status is polled")
	f.StringVar(&detection, "detection", "tuned", "nodes' failure detection: tuned (about 2 s), lan (memberlist's, 5-6 s) or fast (sub-second, false alarms under load)")
	f.IntVar(&threads, "threads", 1, "compute goroutines per node (nodes share this machine's cores)")
	f.StringVar(&evalEvery, "eval-every", "5s", "evaluation cadence")
	f.DurationVar(&computeDelay, "compute-delay", 0, "every node's emulated accelerator time per job batch (a node's --slowdown stretches it; it grows with the batch under --balance)")
	spec.BindFlags(f)
	return cmd
}

// selfCommand is how to run the dssp binary, for the hints commands
// print: "dssp" when that name on PATH is this file, "go run ./cmd/dssp"
// when `go run` built this one in a temporary folder, its path when it is
// a dssp; from another binary (the lab's), the dssp beside it, else
// "dssp".
func selfCommand(exe string) string {
	if p, err := exec.LookPath("dssp"); err == nil && sameFile(p, exe) {
		return "dssp"
	}
	if strings.Contains(filepath.ToSlash(exe), "/go-build") {
		return "go run ./cmd/dssp"
	}
	if filepath.Base(exe) == "dssp" {
		return exe
	}
	if beside := filepath.Join(filepath.Dir(exe), "dssp"); fileExists(beside) {
		return beside
	}
	return "dssp"
}

// checkWritableDir creates the folder a --flag names if needed and probes
// that files can be written in it, before any work.
func checkWritableDir(flag, dir string) error {
	if dir == "" {
		return fmt.Errorf("--%s must not be empty", flag)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--%s %s cannot be created: %w", flag, dir, err)
	}
	probe, err := os.CreateTemp(dir, ".dssp-probe-*")
	if err != nil {
		return fmt.Errorf("--%s %s is not writable: %w", flag, dir, err)
	}
	probe.Close()
	return os.Remove(probe.Name())
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

func isSpecFlag(name string) bool {
	fs := pflag.NewFlagSet("spec", pflag.ContinueOnError)
	s := job.DefaultSpec()
	s.BindFlags(fs)
	return fs.Lookup(name) != nil
}
