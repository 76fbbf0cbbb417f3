// Command dssp is the one binary of the mesh: every node runs it, and it also
// carries the local-mesh launcher (dssp up) and the operator's commands
// (status, export, eval, train, keygen, revoke). The benchmarks, the
// simulator and the link lab are another binary's, cmd/dssp-lab: this one
// links no package of lab/ and no plotting library (repo_test.go,
// TestNodeRunPathHasNoLab).
//
// This file only wires subcommands; each lives in its own file and calls into
// the packages that hold the logic. `dssp node` is package nodecmd, so what a
// node runs is that package's dependencies; `dssp up` is package upcmd,
// which the lab's binary shares.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"dsspmesh/cmd/dssp/nodecmd"
	"dsspmesh/cmd/dssp/upcmd"
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
		upcmd.New(nil),
		newStatusCmd(),
		newTrainCmd(),
		newExportCmd(),
		newEvalCmd(),
		newKeygenCmd(),
		newRevokeCmd(),
	)
	return root
}
