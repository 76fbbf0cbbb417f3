// Command dssp is the one binary of the mesh: every node runs it, and it also
// carries the local-mesh launcher, the simulator and the benchmarks.
//
// This file only wires subcommands; each lives in its own file and calls into
// the packages that hold the logic.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
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
		newNodeCmd(),
		newUpCmd(),
		newStatusCmd(),
		newSimCmd(),
		newTrainCmd(),
		newExportCmd(),
		newEvalCmd(),
		newKeygenCmd(),
		newBenchCmd(),
	)
	return root
}
