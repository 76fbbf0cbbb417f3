// Package faults holds the deliberate bugs that the fault-injection
// checkers of test/ must catch, and the switch that turns them on.
//
// A [Fault] exists only in binaries built with -tags faultinject, where the
// DSSP_FAULTS environment variable (a comma-separated list of names) is
// read once at start; in every other build [On] is a constant false that
// the compiler folds, so the code a fault guards is dropped. The packages
// that honour a fault (shard for the state machine and push service, node
// for bootstrap) import this one; nothing here imports them.
//
// Safe for concurrent use: the switch is fixed before main runs.
package faults
