// Package launch is `dssp up`: it starts N real `dssp node` processes on
// loopback (the running binary itself, so `go run ./cmd/dssp up` works on a
// fresh clone), polls each node's /status, shows live progress, stops at a
// target accuracy or a time limit, and writes a report (CSV files, the
// charts accuracy.png and clocks.png drawn with internal/chart, and
// model.safetensors: the snapshot behind the last evaluation, fetched
// from the evaluating node before the mesh stops with
// nodeclient.FetchModel). It reads nodes through package nodeclient.
// With chaos on it kills a random non-bootstrap node with SIGKILL every
// period, restarts it on the same data directory and ports, and measures
// how long the survivors take to train again and the restarted node to
// rejoin. With Config.Hosts (the link lab's, lab/netlab) node i runs on
// host i instead of loopback: it binds that host's address, serves HTTP on
// the host's HTTP address, and is started through the host's Exec prefix
// (`ip netns exec <namespace>`). With Workers K only the first K nodes train; the others run
// with --train=false and only host shards (no dataset is loaded). Each
// node's peak resident memory (Linux's VmHWM, read from /proc by
// [ReadProcStat]) is sampled at every poll and reported at the end.
//
// # Ports
//
// [NewMesh] gives the nodes 3n distinct loopback ports, each free for TCP
// and UDP when drawn ([FreePorts]); a node binds them only when it starts,
// so another program can take one in between. [Mesh.WaitUp] waits until
// nodes answer /status and restarts a node that exited on a port already
// in use on fresh ports ([Mesh.Rebind], which also rewrites the other
// nodes' --join seeds) — only before it ever ran: a node the mesh has
// seen keeps its addresses, and a restart on a taken port is an error.
//
// # Contract
//
// [Run] blocks until the run ends (target, time limit, ctx cancelled or the
// bootstrap node exiting) and always stops every child it started: SIGTERM,
// then SIGKILL after a grace period. Children are the only processes it
// signals. Each node's log is node<i>.log in the run directory; a
// temporary run directory (no Config.Dir) is removed after a run that
// succeeded and kept, named on Config.Out and in Result.KeptDir, after one
// that failed, missed its target or was interrupted (Result.Interrupted).
// A Mesh's methods are not safe for concurrent use (reading its Procs'
// addresses concurrently is). Polling uses short HTTP timeouts; a node that
// does not answer shows as down in the progress view and in the CSV, it
// does not stop the run.
package launch
