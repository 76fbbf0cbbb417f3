package nodecmd

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"dsspmesh/node"
	"dsspmesh/node/assemble"
	"dsspmesh/node/status"
	// Registers the "cuda" backend in binaries built with -tags cuda.
	_ "dsspmesh/cudaops/cuda"
)

func New() *cobra.Command {
	cfg := node.DefaultConfig()
	var configFile string
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Run one mesh node: it trains, hosts parameter shards, and joins by seed",
		Long: `Run one dssp node. The first node of a mesh bootstraps it with the job given
by its flags (model, paradigm, shards...); every other node is started with
--join <gossip address of any live node> and adopts that job. Every node hosts
replicas of the parameter shards placement assigns it and, unless --train=false,
runs a worker.

Every flag can also come from the environment (DSSP_ and the flag name in
upper case with '-' as '_', e.g. DSSP_GOSSIP_PORT=7946) or from a JSON config
file (--config, keys are flag names). The command line wins over the
environment, which wins over the file.

SIGTERM or SIGINT leaves the mesh gracefully. After a crash, restart with the
same --data-dir: the node keeps its id, job and Raft state, and rejoins the
peers it last saw.

Emulation and A/B flags (--slowdown, --compute-delay, --raft-timing,
--pipeline-fresh, --history-dir) are accepted but not listed here; they are
for the lab (dssp up, dssp-lab bench, the fault suite) and described in
lab/README.md.`,
		Example: `  dssp keygen --out mesh.key
  dssp node --key mesh.key --host 10.0.0.1 --data-dir /var/lib/dssp --paradigm dssp --s-lower 3 --r-max 12
  dssp node --key mesh.key --host 10.0.0.2 --data-dir /var/lib/dssp --join 10.0.0.1:7946`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := LoadSources(cmd.Flags(), configFile, os.Environ()); err != nil {
				return err
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			level, err := node.ParseLogLevel(cfg.LogLevel)
			if err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
			// One node per process: memberlist's and raft's own counters
			// (gossip bytes, heartbeats) can go on this node's /metrics.
			status.CountLibraryTelemetry()
			deps, err := assemble.Node(cfg, log)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return node.Run(ctx, cfg, cmd.Flags().Changed, deps)
		},
	}
	cmd.Flags().StringVar(&configFile, "config", "", "JSON file of flag values, keyed by flag name")
	cfg.BindFlags(cmd.Flags())
	for _, name := range LabKnobs {
		if err := cmd.Flags().MarkHidden(name); err != nil {
			panic("nodecmd: lab knob " + name + ": " + err.Error())
		}
	}
	cmd.SetUsageFunc(groupedUsage)
	cmd.SetContext(context.Background())
	return cmd
}
