// Package upcmd is the `dssp up` subcommand: flags, the door's checks
// (each bad value refused by its flag's name before any node starts),
// node/launch's run, and the closing lines. Package main adds New(nil) to
// the product's root command; the lab's command (cmd/dssp-lab) adds the
// same command with a [Place] that puts the nodes on the link lab
// (`dssp-lab up --link`), so the product links no lab package and the two
// `up`s cannot drift apart.
//
// RunE blocks until the run ends (target, time limit, SIGTERM or SIGINT)
// and owns what it starts: the node processes (node/launch stops every
// one) and whatever Place set up (released when the run ends, error or
// not). It writes progress and the closing lines to the command's output
// and warnings to its error stream.
package upcmd
