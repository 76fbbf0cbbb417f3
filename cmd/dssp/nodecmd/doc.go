// Package nodecmd is the `dssp node` subcommand: it reads a node's flags
// (command line, then DSSP_* environment, then a --config file:
// [LoadSources]), assembles the node's real edges through node/assemble
// and runs node.Run until SIGTERM or SIGINT. Package main only adds [New] to the root command.
//
// It is a package of its own so that what a node process runs is a set
// that can be listed: `go list -deps dsspmesh/cmd/dssp/nodecmd` is every
// package `dssp node` calls into, and repo_test.go
// (TestNodeRunPathHasNoLab) fails if that set holds a package of lab/ or a
// plotting library. (Every package linked into the binary still runs its
// init at start-up; none under lab/ declares one.)
//
// # Help
//
// `dssp node --help` prints the flags under headings (network and
// membership, job, training, storage, observability). The emulation and
// A/B knobs in [LabKnobs] are registered as always (node.Config.BindFlags,
// job.Spec.BindFlags) and accepted, but hidden from the help; no flag
// is renamed or removed.
package nodecmd
