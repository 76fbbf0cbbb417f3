package cli

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"dsspmesh/lab/bench"
	"dsspmesh/lab/netlab"
)

func newBenchBigModelCmd() *cobra.Command {
	cfg := bench.DefaultBigModelConfig()
	var out, link string
	var jobFlags []string
	cmd := &cobra.Command{
		Use:   "bigmodel",
		Short: "Train a ~100 MB model on a local mesh and report each node's RSS and data dir as multiples of its size",
		Long: `Train --model (default mlp-wide: 784 → 4608 → 4608 → 10, 24.9M parameters,
99.6 MB) on --dataset for --time on a local mesh of --nodes 'dssp node'
processes, and report each node's peak resident memory (VmHWM) and its data
dir's bytes as multiples of the model's bytes, against the targets: RSS ≤ 6×
and data dir ≤ 8×. Writes --out/bigmodel.md. Heavy: it runs --nodes
processes each holding several hundred megabytes for --time.`,
		Example: `  dssp-lab bench bigmodel
  dssp-lab bench bigmodel --time 1m --job-flag=--shards=8
  dssp-lab bench bigmodel --link two-sites --time 3m`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := nodeBinary()
			if err != nil {
				return err
			}
			cfg.Binary = bin
			cfg.Out = cmd.OutOrStdout()
			cfg.SpecArgs = append(cfg.SpecArgs, jobFlags...) // after the defaults, so they win
			if link != "" {
				spec, err := netlab.ParseSpec(link)
				if err != nil {
					return err
				}
				cfg.Link = &spec
				if !cmd.Flags().Changed("nodes") {
					cfg.Nodes = spec.Nodes()
				}
			}
			ctx, log, stop := benchContext(cmd, slog.LevelError)
			defer stop()
			res, err := bench.RunBigModel(ctx, cfg, log)
			if res != nil && len(res.Run.Nodes) > 0 {
				if werr := res.Write(out); werr != nil && err == nil {
					err = werr
				}
				fmt.Fprintf(cmd.OutOrStdout(), "\n%s\nwritten to %s/bigmodel.md\n", res.Markdown(), out)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "node processes")
	f.IntVar(&cfg.Threads, "threads", cfg.Threads, "compute goroutines per node")
	f.DurationVar(&cfg.Duration, "time", cfg.Duration, "how long the mesh trains")
	f.StringVar(&cfg.Model, "model", cfg.Model, "model to train")
	f.StringVar(&cfg.Dataset, "dataset", cfg.Dataset, "dataset")
	f.DurationVar(&cfg.EvalEvery, "eval-every", cfg.EvalEvery, "evaluation cadence (an evaluation reads the whole model)")
	f.StringSliceVar(&jobFlags, "job-flag", nil, "further job flags for the bootstrap node, repeatable, after the defaults ("+strings.Join(cfg.SpecArgs, " ")+"), which they override")
	f.StringSliceVar(&cfg.NodeArgs, "node-flag", nil, "further flags for every node, repeatable (--node-flag=--pprof)")
	f.StringVar(&cfg.Dir, "dir", "", "keep the run folder (data dirs, node logs) here (default: a temporary folder, removed afterwards)")
	f.DurationVar(&cfg.CeilingTime, "ceiling-time", 0, "measure the job's compute ceiling first (one single-threaded worker in process for this long, × the cores) and the cores computing at once (one single-threaded worker per core, each on its own model, as long), and report samples/s as a share of each (0: skip)")
	f.Float64Var(&cfg.RSSFactor, "rss-factor", cfg.RSSFactor, "target: peak RSS per node ≤ this × the model's bytes")
	f.Float64Var(&cfg.DiskFactor, "disk-factor", cfg.DiskFactor, "target: data dir per node ≤ this × the model's bytes")
	f.StringVar(&out, "out", "bench-bigmodel", "folder for bigmodel.md")
	f.StringVar(&link, "link", "", "train on the link lab (root), unshaped first (the baseline), then shaped, --time each: two-sites, switch, or keys over a preset (see dssp-lab bench paradigms --help)")
	return cmd
}
