// Package cli holds the lab's subcommands of the dssp binary: `dssp bench`
// (paradigms, mesh, memory, bigmodel, scale; package lab/bench) and
// `dssp sim` (package lab/sim). Package main adds [NewBenchCmd] and
// [NewSimCmd] to its root command and holds no logic of theirs.
//
// Each command parses its flags, calls the lab package and renders the
// plain result it returns. SIGTERM and SIGINT cancel a benchmark's
// context; the lab package stops every node process it started.
package cli
