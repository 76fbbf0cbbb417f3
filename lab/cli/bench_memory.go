package cli

import (
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"dsspmesh/lab/bench"
)

func newBenchMemoryCmd() *cobra.Command {
	cfg := bench.DefaultMemoryConfig()
	var out string
	cmd := &cobra.Command{
		Use:   "memory",
		Short: "Peak RSS and data dir per node of a local mesh, beside a baseline build's in the same run",
		Long: `Run a local mesh of --nodes 'dssp node' processes (as 'dssp up' does, no
accuracy target) for --time, and report each node's peak resident memory
(VmHWM) and its data dir's bytes, largest while it ran and after it stopped.
With --baseline BIN (a dssp binary built from another commit, e.g. from a git
worktree), the same mesh of that binary runs first, so both figures come from
one run on one machine. Checks the issue's targets: peak RSS ≤ 200 MiB and
data dir ≤ 64 MiB per node. Writes --out/memory.md.`,
		Example: `  git worktree add /tmp/dssp-base HEAD~5 && (cd /tmp/dssp-base && go build -o /tmp/dssp-base.bin ./cmd/dssp)
  dssp-lab bench memory --baseline /tmp/dssp-base.bin
  dssp-lab bench memory --time 2m --job-flag=--paradigm=bsp`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := nodeBinary()
			if err != nil {
				return err
			}
			cfg.Binary = bin
			cfg.Out = cmd.OutOrStdout()
			ctx, log, stop := benchContext(cmd, slog.LevelError)
			defer stop()
			res, err := bench.RunMemory(ctx, cfg, log)
			if res != nil && len(res.Runs) > 0 {
				if werr := res.Write(out); werr != nil && err == nil {
					err = werr
				}
				fmt.Fprintf(cmd.OutOrStdout(), "\n%s\nwritten to %s/memory.md\n", res.Markdown(), out)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Baseline, "baseline", "", "a dssp binary of another build to measure first, the same way (empty: none)")
	f.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "node processes per mesh")
	f.IntVar(&cfg.Threads, "threads", cfg.Threads, "compute goroutines per node")
	f.DurationVar(&cfg.Duration, "time", cfg.Duration, "how long each mesh trains")
	f.StringSliceVar(&cfg.SpecArgs, "job-flag", nil, "job flag for the bootstrap node, repeatable (e.g. --job-flag=--model=lenet)")
	f.StringVar(&out, "out", "bench-memory", "folder for memory.md")
	return cmd
}
