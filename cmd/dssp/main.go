// Command dssp is the one binary of the mesh: every node runs it, and it also
// carries the local-mesh launcher, the simulator and the benchmarks.
//
// This file only wires subcommands; each lives in its own file and calls into
// the packages that hold the logic. `dssp node` is package nodecmd, so what a
// node runs is that package's dependencies (repo_test.go checks they hold no
// lab package); `dssp bench` and `dssp sim` are the lab's (package lab/cli).
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"dsspmesh/cmd/dssp/nodecmd"
	"dsspmesh/lab/cli"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "dssp:", err)
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "dssp",
		Short:         "A peer-to-peer deep-learning training mesh with Dynamic Stale Synchronous Parallel",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		nodecmd.New(),
		newUpCmd(),
		newStatusCmd(),
		cli.NewSimCmd(),
		newTrainCmd(),
		newExportCmd(),
		newEvalCmd(),
		newKeygenCmd(),
		newRevokeCmd(),
		cli.NewBenchCmd(),
	)
	return root
}
