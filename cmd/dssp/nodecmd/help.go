package nodecmd

import (
	"fmt"
	"io"
	"slices"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// flagGroup is one heading of `dssp node --help` and the flags under it.
type flagGroup struct {
	title string
	flags []string
}

// flagGroups are the headings of `dssp node --help`, in order. --config,
// --help and any visible flag listed under none are printed first, under
// "Flags"; TestEveryNodeFlagHasAHeading keeps that last kind absent.
var flagGroups = []flagGroup{
	{"Network and membership", []string{"host", "gossip-port", "quic-port", "http-addr", "advertise-gossip", "advertise-quic",
		"join", "join-timeout", "key", "insecure", "insecure-public", "detection", "leave-timeout"}},
	{"Job (set on the bootstrap node; joiners adopt it)", []string{"model", "dataset", "paradigm", "s-lower", "r-max",
		"combine", "optimizer", "lr", "momentum", "lr-decay", "lr-decay-samples", "batch", "shards", "replication", "seed",
		"outlier-factor", "balance", "pipeline", "init-from", "wire-precision",
		"local-steps", "outer-optimizer", "outer-lr", "outer-momentum", "inner-optimizer", "inner-lr"}},
	{"Training", []string{"train", "trainer", "backend", "threads", "data", "memory-limit", "eval-every", "eval-samples", "audit-fraction"}},
	{"Storage", []string{"data-dir", "checkpoint-dir", "checkpoint-every", "checkpoint-keep"}},
	{"Observability", []string{"log-level", "pprof"}},
}

// LabKnobs are the node's emulation and A/B flags: accepted by `dssp node`
// (so `dssp up`, the benchmarks and test/ pass them to node processes) but
// hidden from its --help. lab/README.md#lab-knobs says what each does.
var LabKnobs = []string{
	"slowdown",        // emulate a slower accelerator: stretch the measured compute time
	"compute-delay",   // emulate accelerator time per batch
	"raft-timing",     // A/B: scaled or fixed Raft timeouts on nodes hosting many groups
	"pipeline-fresh",  // A/B: share of a pipelined batch computed on the fresh parameters
	"history-dir",     // the fault suite's history files, for its checkers
	"fault-nan-every", // fault injection: every Nth gradient NaN
}

// groupedUsage prints c's usage with its flags under flagGroups' headings;
// hidden flags are left out, as pflag leaves them out.
func groupedUsage(c *cobra.Command) error {
	w := c.OutOrStderr()
	fmt.Fprintf(w, "Usage:\n  %s\n", c.UseLine())
	if c.HasExample() {
		fmt.Fprintf(w, "\nExamples:\n%s\n", c.Example)
	}
	all := c.Flags()
	general := pflag.NewFlagSet("general", pflag.ContinueOnError)
	all.VisitAll(func(f *pflag.Flag) {
		if groupOf(f.Name) < 0 {
			general.AddFlag(f)
		}
	})
	printGroup(w, "Flags", general)
	for _, g := range flagGroups {
		fs := pflag.NewFlagSet(g.title, pflag.ContinueOnError)
		fs.SortFlags = false // the heading's own order
		for _, name := range g.flags {
			if f := all.Lookup(name); f != nil {
				fs.AddFlag(f)
			}
		}
		printGroup(w, g.title+" flags", fs)
	}
	return nil
}

// groupOf is the index in flagGroups of the heading that lists name, -1
// for none.
func groupOf(name string) int {
	return slices.IndexFunc(flagGroups, func(g flagGroup) bool { return slices.Contains(g.flags, name) })
}

// printGroup prints fs's visible flags under a heading, nothing if none.
func printGroup(w io.Writer, heading string, fs *pflag.FlagSet) {
	if u := fs.FlagUsages(); u != "" {
		fmt.Fprintf(w, "\n%s:\n%s", heading, u)
	}
}
