// Command dssp-lab is the lab's binary: the benchmarks (`dssp-lab bench`,
// package lab/bench), the simulator (`dssp-lab sim`, lab/sim) and
// `dssp-lab up --link`, dssp up on the link lab (lab/netlab). It is a
// binary apart so that the product, cmd/dssp, links no lab package and no
// plotting library; it stays in this module so that `go test ./...`, `go
// vet ./...` and CI cover it with the rest (lab/README.md).
//
// The benchmarks and `up` start this binary itself as their nodes: it
// carries `dssp node` (package nodecmd, the product's, unchanged) as a
// hidden subcommand. This file only wires subcommands.
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
		fmt.Fprintln(os.Stderr, "dssp-lab:", err)
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "dssp-lab",
		Short:         "The lab of dssp: benchmarks on real local meshes, the simulator, local meshes on the link lab",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	node := nodecmd.New()
	node.Hidden = true // what the benchmarks start; operators run dssp node
	root.AddCommand(cli.NewBenchCmd(), cli.NewSimCmd(), cli.NewUpCmd(), node)
	return root
}
