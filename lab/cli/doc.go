// Package cli holds the subcommands of the lab's binary, cmd/dssp-lab:
// `dssp-lab bench` (paradigms, mesh, memory, bigmodel, scale, pytorch;
// package lab/bench), `dssp-lab sim` (package lab/sim) and `dssp-lab up`,
// the product's `dssp up` (package cmd/dssp/upcmd) with --link, which puts
// the nodes on the link lab (lab/netlab). Package main adds [NewBenchCmd],
// [NewSimCmd] and [NewUpCmd] to its root command and holds no logic of
// theirs.
//
// Each command parses its flags, calls the lab package and renders the
// plain result it returns. SIGTERM and SIGINT cancel a benchmark's
// context; the lab package stops every node process it started.
package cli
