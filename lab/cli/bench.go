package cli

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"dsspmesh/lab/bench"
	"dsspmesh/lab/netlab"
	"dsspmesh/node"
)

// NewBenchCmd is `dssp-lab bench` and its subcommands (package lab/bench).
func NewBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmarks: paradigms on real local meshes, and the mesh's own costs",
		Long: `bench paradigms  compares BSP, ASP, SSP, DSSP and dssp-paper on real local meshes
bench mesh       measures the transport, Raft replication, the gate and the mesh's
                 iteration throughput, each against a baseline in the same run
bench scale      how formation, memory, CPU, gossip, Raft heartbeats and placement
                 churn grow with the number of nodes and shards
bench pytorch    the PyTorch MLP through the mesh vs the built-in Go MLP vs PyTorch
                 DDP (gloo): time to target, samples/s, the trainer bridge's cost

See BENCHMARKS.md for a full run and how to read it.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newBenchParadigmsCmd(), newBenchMeshCmd(), newBenchMemoryCmd(), newBenchBigModelCmd(), newBenchScaleCmd(), newBenchPyTorchCmd())
	return cmd
}

func newBenchParadigmsCmd() *cobra.Command {
	cfg := bench.DefaultParadigmsConfig()
	var (
		paradigms, targets, hetero string
		localSteps                 string
		link                       string
		homogeneous                bool
		verbose                    bool
		render                     string
		costs                      bool
	)
	cmd := &cobra.Command{
		Use:   "paradigms",
		Short: "Time to target accuracy of each paradigm on real local meshes, homogeneous and heterogeneous",
		Long: `Run, for each paradigm, a real local mesh of --workers 'dssp node' processes (as
'dssp up' does) with the same job (model, data, batch, learning-rate schedule by
global samples), once with every worker at full speed and once with
--slowdown (which stretches only each worker's own compute time), --repeats
times each, and report the median time to each of --targets, the final
accuracy, the mesh's iterations/s and samples/s, the model bytes on the wire per
training sample, the share of the workers' capacity used (and, with
--ceiling-time, of the machine's compute ceiling) and each worker's share of
time spent waiting. --local-steps runs each paradigm as local rounds too.
A target not reached within --time-limit is reported as such.

Writes into --out: report.md (tables), runs.csv, summary.csv,
accuracy-homogeneous.png, accuracy-heterogeneous.png, and runs/ (each mesh's
own report).

The defaults are the full comparison (7 paradigms × 2 settings × 3 repeats,
up to 10 minutes each); see BENCHMARKS.md for a shorter run.`,
		Example: `  dssp-lab bench paradigms
  dssp-lab bench paradigms --repeats 1 --time-limit 90s --targets 0.9,0.95,0.97
  dssp-lab bench paradigms --paradigms ssp:3,dssp:3:12 --slowdown 1,1,1,4 --homogeneous=false
  dssp-lab bench paradigms --render bench-paradigms --ref-target 0.95
  dssp-lab bench paradigms --render bench-paradigms --costs
  dssp-lab bench paradigms --repeats 1 --paradigms bsp,asp,ssp:3,dssp:3:12,dssp-paper:3:12,ssp:1+balance --compute-delay 40ms --targets 0.95,0.97
  dssp-lab bench paradigms --repeats 1 --paradigms dssp:3:12 --local-steps 1,4,16,64 --ceiling-time 20s --targets 0.95,0.97
  dssp-lab bench paradigms --link two-sites --repeats 1 --paradigms dssp:3:12 --local-steps 1,16 --slowdown "" --targets 0.95,0.97`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := nodeBinary()
			if err != nil {
				return err
			}
			if render != "" {
				res, err := bench.LoadParadigms(render)
				if err != nil {
					return err
				}
				if cmd.Flags().Changed("ref-target") {
					res.Config.RefTarget = cfg.RefTarget
				}
				if err := res.Config.Validate(); err != nil {
					return err
				}
				if err := res.Write(render); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s\nreport rewritten in %s/\n", res.Markdown(), render)
				if costs {
					return writeCosts(cmd.OutOrStdout(), render, res.Config.Targets)
				}
				return nil
			}
			cfg.Binary = bin
			cfg.Out = cmd.OutOrStdout()
			cfg.Verbose = verbose
			cfg.Variants = nil
			for _, p := range strings.Split(paradigms, ",") {
				cfg.Variants = append(cfg.Variants, bench.Variant(strings.TrimSpace(p)))
			}
			if localSteps != "" {
				var hs []int
				for _, h := range strings.Split(localSteps, ",") {
					n, err := strconv.Atoi(strings.TrimSpace(h))
					if err != nil || n < 1 {
						return fmt.Errorf("--local-steps %q: %q is not a whole number >= 1", localSteps, h)
					}
					hs = append(hs, n)
				}
				cfg.Variants = bench.WithLocalSteps(cfg.Variants, hs)
			}
			if cfg.Targets, err = node.ParseFloats("targets", targets); err != nil {
				return err
			}
			if !cmd.Flags().Changed("ref-target") && len(cfg.Targets) > 0 && !contains(cfg.Targets, cfg.RefTarget) {
				cfg.RefTarget = cfg.Targets[len(cfg.Targets)-1]
			}
			cfg.Settings = nil
			if homogeneous {
				cfg.Settings = append(cfg.Settings, bench.Setting{Name: "homogeneous"})
			}
			if hetero != "" {
				s, err := node.ParseFloats("slowdown", hetero)
				if err != nil {
					return err
				}
				cfg.Settings = append(cfg.Settings, bench.Setting{Name: "heterogeneous", Slowdown: s})
			}
			if link != "" {
				spec, err := netlab.ParseSpec(link)
				if err != nil {
					return err
				}
				cfg.Settings = bench.LinkSettings(cfg.Settings, spec)
				if !cmd.Flags().Changed("workers") {
					cfg.Workers = spec.Nodes()
				}
			}
			ctx, log, stop := benchContext(cmd, slog.LevelWarn)
			defer stop()
			res, err := bench.RunParadigms(ctx, cfg, log)
			if res != nil {
				fmt.Fprintf(cmd.OutOrStdout(), "\n%s\nreport in %s/ (report.md, runs.csv, summary.csv, accuracy-*.png)\n", res.Markdown(), cfg.OutDir)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Workers, "workers", cfg.Workers, "node processes per mesh")
	f.StringVar(&paradigms, "paradigms", joinVariants(cfg.Variants), "paradigms to compare: bsp, asp, ssp:S, dssp:SL:RMAX, dssp-paper:SL:RMAX; suffixes +balance (the balance layer) and +pipeline (the pipelined loop) add job flags (ssp:1+balance+pipeline)")
	f.StringVar(&localSteps, "local-steps", "", "comma-separated --local-steps H to run every paradigm at (1,4,16,64: each paradigm as is and as rounds of 4, 16 and 64 local steps, the +hN suffix)")
	f.DurationVar(&cfg.CeilingTime, "ceiling-time", 0, "measure the machine's compute ceiling first (one single-threaded worker in process for this long, × the cores) and report each mesh's samples/s as a share of it (0: skip; not with --compute-delay)")
	f.StringVar(&link, "link", "", "run every mesh on the link lab (root): each node in a network namespace, on this topology shaped and, as its baseline, unshaped — two-sites (2 × 2 hosts, 1gbit within, 100mbit and 25ms one way between), switch (4 hosts at 100mbit), or keys sites, hosts, rate, between, delay, loss, queue over a preset (two-sites,delay=50ms)")
	f.BoolVar(&homogeneous, "homogeneous", true, "run the homogeneous setting (--homogeneous=false: skip it)")
	f.StringVar(&hetero, "slowdown", bench.FormatFloats(cfg.Settings[1].Slowdown), "per-worker compute slowdowns of the heterogeneous setting, cycled (empty: skip it)")
	f.IntVar(&cfg.Repeats, "repeats", cfg.Repeats, "runs per paradigm and setting; the median is reported")
	f.StringVar(&targets, "targets", bench.FormatFloats(cfg.Targets), "test accuracies to time; each mesh stops at the highest")
	f.Float64Var(&cfg.RefTarget, "ref-target", cfg.RefTarget, "target of the ratio columns (default: 0.97, or the highest target if 0.97 is not one)")
	f.DurationVar(&cfg.TimeLimit, "time-limit", cfg.TimeLimit, "longest run of one mesh")
	f.DurationVar(&cfg.EvalEvery, "eval-every", cfg.EvalEvery, "evaluation cadence of the mesh (the resolution of the times)")
	f.IntVar(&cfg.EvalSamples, "eval-samples", 0, "test samples per evaluation (0: the whole test set); the evaluating node also trains, so evaluation slows it")
	f.DurationVar(&cfg.Poll, "poll", cfg.Poll, "how often each node's /status is polled")
	f.IntVar(&cfg.Threads, "threads", cfg.Threads, "compute goroutines per node (the nodes share this machine's cores)")
	f.DurationVar(&cfg.ComputeDelay, "compute-delay", 0, "every node's emulated accelerator time per job batch (--slowdown stretches it, a balanced worker's batch scales it)")
	f.StringSliceVar(&cfg.SpecArgs, "job-flag", nil, "extra job flag for every mesh, repeatable (e.g. --job-flag=--model=lenet)")
	f.StringSliceVar(&cfg.NodeArgs, "node-flag", nil, "extra flag for every node process, repeatable (--node-flag=--pprof: profile a mesh while it runs)")
	f.StringVar(&cfg.OutDir, "out", cfg.OutDir, "folder for the report")
	f.StringVar(&render, "render", "", "run nothing: rewrite the report of an earlier run from its folder (runs.csv, runs/*/accuracy.csv)")
	f.BoolVar(&costs, "costs", false, "with --render: also each worker's steady ms/iteration = compute + wait, the spread of the workers' iterations and the mean iteration at each target, from runs/*/workers.csv (into costs.md)")
	f.BoolVar(&verbose, "verbose", false, "show every node's progress line, not only each mesh's headline")
	return cmd
}

func joinVariants(v []bench.Variant) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = string(x)
	}
	return strings.Join(s, ",")
}

func contains(v []float64, x float64) bool {
	for _, y := range v {
		if y == x {
			return true
		}
	}
	return false
}

func newBenchMeshCmd() *cobra.Command {
	cfg := bench.DefaultMeshConfig()
	var (
		replicas string
		noMesh   bool
		out      string
	)
	cmd := &cobra.Command{
		Use:   "mesh",
		Short: "The mesh's own costs, each as a ratio against a baseline measured in the same run",
		Long: `Measure, in one run, each against its baseline:
  transport     push-sized round trips over the mesh's QUIC transport vs raw quic-go
                with the same TLS certificates and windows (alternated);
  replication   pushes/s and MiB/s through a Raft-replicated shard at each of
                --replicas vs an unreplicated echo of the same payload over QUIC;
  gate          ns per push of each paradigm's gate vs ASP's, and as a share of
                one replicated push;
  throughput    iterations/s of --workers real node processes through the mesh
                vs as many goroutines training the same model on an in-process
                parameter vector with no network.
Writes --out/mesh.md.`,
		Example: `  dssp-lab bench mesh
  dssp-lab bench mesh --replicas 1,3,5 --payload 1048576 --no-process-mesh`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !noMesh {
				bin, err := nodeBinary()
				if err != nil {
					return err
				}
				cfg.Binary = bin
			}
			cfg.Replication.Replicas = nil
			for _, p := range strings.Split(replicas, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(p))
				if err != nil {
					return fmt.Errorf("--replicas: %q is not a number", p)
				}
				cfg.Replication.Replicas = append(cfg.Replication.Replicas, n)
			}
			cfg.Out = cmd.OutOrStdout()
			ctx, log, stop := benchContext(cmd, slog.LevelError)
			defer stop()
			res, err := bench.RunMesh(ctx, cfg, log)
			if err != nil {
				return err
			}
			if err := res.Write(out); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "\n%s\nwritten to %s/mesh.md\n", res.Markdown(), out)
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Payload, "payload", 0, "bytes per push for transport and replication (0: one shard's slice of the job's model)")
	f.DurationVar(&cfg.Transport, "transport-time", cfg.Transport, "length of the transport measurement")
	f.StringVar(&replicas, "replicas", "1,3", "replica counts to measure")
	f.IntVar(&cfg.Replication.Workers, "push-workers", cfg.Replication.Workers, "concurrent pushing workers in the replication measurement")
	f.DurationVar(&cfg.Replication.Duration, "replication-time", cfg.Replication.Duration, "length of each replication measurement")
	f.BoolVar(&cfg.Disk, "disk", cfg.Disk, "replicas keep their Raft log on disk (bbolt), as a node does (false: in memory)")
	f.IntVar(&cfg.GatePushes, "gate-pushes", cfg.GatePushes, "pushes per gate policy")
	f.IntVar(&cfg.GateWorkers, "gate-workers", cfg.GateWorkers, "simulated workers in the gate measurement")
	f.IntVar(&cfg.Workers, "workers", cfg.Workers, "workers for the iteration-throughput comparison")
	f.IntVar(&cfg.Threads, "threads", cfg.Threads, "compute goroutines per worker")
	f.DurationVar(&cfg.MeshTime, "mesh-time", cfg.MeshTime, "how long the process mesh trains (start-up excluded from the rate)")
	f.DurationVar(&cfg.InprocTime, "inproc-time", cfg.InprocTime, "how long the in-process baseline trains")
	f.BoolVar(&noMesh, "no-process-mesh", false, "skip the process mesh (the baseline still runs)")
	f.DurationVar(&cfg.CeilingTime, "ceiling-time", cfg.CeilingTime, "how long one single-threaded in-process worker trains for the compute ceiling (cores × its samples/s)")
	f.StringVar(&cfg.BaselineBinary, "baseline-binary", "", "a dssp binary of an earlier build (e.g. built from a git worktree of the previous commit) whose replication and process-mesh figures are measured in the same run and printed beside this build's")
	f.StringVar(&cfg.DataDir, "data", "", "MNIST folder for the in-process baseline (default: found as the node finds it)")
	f.StringVar(&out, "out", "bench-mesh", "folder for mesh.md")
	cfg.Spec.BindFlags(f)
	return cmd
}

func newBenchScaleCmd() *cobra.Command {
	cfg := bench.DefaultScaleConfig()
	var (
		nodes, shards string
		variants      []string
		render        bool
	)
	cmd := &cobra.Command{
		Use:   "scale",
		Short: "How the mesh's costs grow with nodes and shards, on real local meshes",
		Long: `For every N of --nodes and S of --shards (and every --variant), start N
host-only 'dssp node' processes (--train=false) on loopback and measure:
  formation     time until every node lists every other, and until every shard
                has a leader whose Raft voters are the replicas placement
                gives it over those members;
  idle costs    per node over --idle: RSS, CPU, memberlist bytes sent, Raft
                heartbeats answered, goroutines, Raft groups hosted;
  churn         one more node joins, then leaves gracefully: the replicas
                added to shards' voter sets each time, counted between polls
                in which every node answered and the voters matched placement
                (placement should move about S·R/(N+1), a few more where its
                per-node cap changes), and how
                long the mesh took to settle;
  training      --trainers training nodes join; CPU and RSS of hosts and
                trainers over --train, and the iterations/s.
Each point is appended to --out/scale.csv as it completes (a point run again
replaces its row), and --out/scale.md (the table) and scale.png (each cost
against N) are rewritten from the whole file, so the sweep can run in pieces.`,
		Example: `  dssp-lab bench scale --nodes 4,8 --shards 4,16,64
  dssp-lab bench scale --nodes 32 --shards 4,64
  dssp-lab bench scale --nodes 16 --shards 64 --variant fixed:--raft-timing=fixed --variant scaled:
  dssp-lab bench scale --render`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			if render {
				res, err := bench.LoadScale(cfg.OutDir)
				if err != nil {
					return err
				}
				if err := res.Write(cfg.OutDir); err != nil {
					return err
				}
				fmt.Fprintf(out, "%s\nreport rewritten in %s/ (scale.md, scale.png)\n", res.Markdown(), cfg.OutDir)
				return nil
			}
			bin, err := nodeBinary()
			if err != nil {
				return err
			}
			cfg.Binary, cfg.Out = bin, out
			if cfg.Nodes, err = parseInts("nodes", nodes); err != nil {
				return err
			}
			if cfg.Shards, err = parseInts("shards", shards); err != nil {
				return err
			}
			if len(variants) > 0 {
				cfg.Variants = nil
				for _, v := range variants {
					sv, err := bench.ParseScaleVariant(v)
					if err != nil {
						return err
					}
					cfg.Variants = append(cfg.Variants, sv)
				}
			}
			ctx, log, stop := benchContext(cmd, slog.LevelError)
			defer stop()
			res, err := bench.RunScale(ctx, cfg, log)
			if res != nil && len(res.Points) > 0 {
				fmt.Fprintf(out, "\n%s\nreport in %s/ (scale.csv, scale.md, scale.png)\n", res.Markdown(), cfg.OutDir)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&nodes, "nodes", "4,8,16,32", "mesh sizes N (host-only nodes), comma-separated")
	f.StringVar(&shards, "shards", "4,16,64", "shard counts S, comma-separated")
	f.IntVar(&cfg.Replication, "replication", cfg.Replication, "replicas per shard R")
	f.IntVar(&cfg.Trainers, "trainers", cfg.Trainers, "training nodes that join for the training window (0: skip it)")
	f.IntVar(&cfg.Threads, "threads", cfg.Threads, "compute goroutines per trainer")
	f.DurationVar(&cfg.Idle, "idle", cfg.Idle, "idle measurement window")
	f.DurationVar(&cfg.Train, "train", cfg.Train, "training measurement window")
	f.DurationVar(&cfg.Converge, "converge", cfg.Converge, "longest wait for the mesh to form or settle after a join or leave")
	f.BoolVar(&cfg.Churn, "churn", cfg.Churn, "measure one node joining and leaving")
	f.DurationVar(&cfg.Poll, "poll", cfg.Poll, "how often every node's /status is polled while waiting")
	f.StringVar(&cfg.Detection, "detection", cfg.Detection, "nodes' failure detection: tuned, lan or fast (as dssp node's --detection)")
	f.StringArrayVar(&variants, "variant", nil, "NAME:FLAGS, repeatable: run every point once per variant with these extra node flags (default: one variant, 'default', no extra flags)")
	f.StringSliceVar(&cfg.SpecArgs, "job-flag", nil, "extra job flag for the bootstrap node, repeatable (e.g. --job-flag=--model=lenet)")
	f.StringVar(&cfg.OutDir, "out", cfg.OutDir, "folder for scale.csv, scale.md and scale.png (points accumulate across runs)")
	f.StringVar(&cfg.ProfileDir, "profile-dir", "", "save a CPU profile of node 1 over each idle window here (give the nodes --pprof through --variant)")
	f.BoolVar(&render, "render", false, "run nothing: rewrite scale.md and scale.png from --out/scale.csv")
	return cmd
}

func parseInts(flag, s string) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("--%s: %q is not a number", flag, p)
		}
		out = append(out, n)
	}
	return out, nil
}

// writeCosts prints and writes dir/costs.md: bench.CostsMarkdown of the
// runs under dir.
func writeCosts(w io.Writer, dir string, targets []float64) error {
	c, err := bench.LoadCosts(dir, targets)
	if err != nil {
		return err
	}
	md := bench.CostsMarkdown(c, targets)
	if err := os.WriteFile(filepath.Join(dir, "costs.md"), []byte(md), 0o644); err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "\n%s\ncosts in %s/costs.md\n", md, dir)
	return err
}
