// Package test holds multi-process tests that run real dssp binaries on
// loopback: the end-to-end test of the node (bootstrap, join by seed,
// training, kill -9 of the busiest shard leader, restart), bad input at the
// command line, and the HTTP surface (/metrics, /status, the dashboard in
// headless Chromium).
//
// harness.go is the shared rig: [Binary] builds cmd/dssp once per test
// process, [Cluster] starts, kills and restarts node processes and reads
// their /status, and WaitFor polls a condition under a deadline (the only
// waiting these tests do). Every process a test starts is stopped when it
// ends.
package test
