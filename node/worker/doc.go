// Package worker is the worker room of a node: the loop of
// docs/design.md#one-iteration-end-to-end, and nothing of the node around
// it. It gets what it needs through [Deps] (the compute, the transport and
// membership that reach the shards, the observer, the metrics, a logger)
// and [Config] (the job as the worker runs it); it never sees the node.
//
// # Loop
//
// One goroutine: compute the gradient of the next mini-batch on the local θ,
// push each shard's slice to that shard's leader concurrently (one
// shardapi.Client per shard), wait for every reply, replace θ with the slices
// returned, repeat. A slice whose version still covers the next iteration
// within s_L is kept: that push asks for no parameters (pull.go, Step.Keep;
// docs/design.md, "The read guarantee"), and before each gradient the
// worker reports the versions of θ's slices and, under --balance, its
// share of the global batch to the records.Observer (Computing).
// With --pipeline (pipeline.go) the push of t stays in flight while the
// loop computes t+1 on θ as the OK of t−1 left it — the first 1 −
// --pipeline-fresh of its batch; the rest waits for the push and is computed
// on the θ it brought, the two gradients mixed by samples; the push's goroutines
// own the clocks (Step.Iters), the clients and a landing buffer the slices are decoded
// into, the loop owns θ, the versions and the assignments, and copies the
// landed slices into θ only after the push returned. The shards' gate
// releases one iteration earlier for it (s_L − 1), so the slices keep the
// paradigm's bound; a refused push or a moved clock drops the gradient
// computed ahead. NotLeader redirects and resends after a transport
// error keep the same (worker, iter), so they are applied at most once.
// --slowdown and --compute-delay (emulate.go, a [Compute] decorator the
// node applies when they are set) stretch only the compute time of this
// worker (sleeping after the gradient), never time spent waiting for
// others: slowdown·(measured + delay·batch/job batch), so emulated compute
// grows with the batch as real compute does; the stretched time is what
// the push reports as compute_ns. Under --balance (balance.go) the
// batch and its position in the job-wide data order come from the
// assignment shard 0's OK named for that iteration (the OK of t−1 names
// t's, and under --pipeline the OK of t−2 names it too), and /status and /metrics show
// the batch, the allocation's version and the predicted compute time.
// Each push is reported to the records.Observer before it is sent and when it
// returns; with --history-dir the observer is the node's debug history,
// otherwise one that records nothing.
//
// # Decisions
//
// What the loop does after a reply, a re-add, a whole push settling or an
// align round is decided by [Step] (step.go), a pure state machine over
// the clocks per shard, the slices' versions and the refusals in a row:
// inputs in, decisions out, no I/O and no clock. The loop does the I/O each
// decision names. step_test.go replays scripts through it against golden
// transcripts (an iteration, a push, replies, a gate hold, a re-add, a
// leader change, a join).
//
// # Compute
//
// The gradient of a mini-batch comes from a [Compute]: the parameter
// count, the next batch, the gradient of a range of its samples handed
// over in pieces. [ModelCompute] is the built-in Go models' (cudaops);
// node/trainer's External is an external trainer process's (a PyTorch
// loop attached to the node's trainer socket), which the node hands to a
// worker while that trainer is attached;
// [Emulate] wraps any Compute with the lab's slowdown, compute delay and
// fault poison (--fault-nan-every: every n-th gradient NaN). The loop, the
// gates, the pipeline and the balance layer do not know which runs.
//
// # Shard clients
//
// Every call into shardapi.Client is in shardclient.go.
//
// # Bad gradients
//
// A gradient the shards refuse (NaN/Inf, a norm outlier, a step that
// would make a parameter non-finite) is recorded as an event (which the
// node's event log logs, one line per reason per 10 s), counted and replaced: the
// worker computes another and sends the same iteration to the shards that
// refused it; after 20 refusals in a row it stops with the reason
// ([Worker.Stop], as a diverged evaluation stops it).
//
// # Concurrency
//
// [Worker.Run] is one goroutine; each push starts one goroutine per shard
// and waits for them (under --pipeline, while the loop computes the next
// gradient). [Worker.Status], [Worker.Stop], [Worker.Borrow] and
// [Worker.Finished] are safe for concurrent use; [Worker.Leave] is called
// once, after Run's ctx ended. Worker.mu guards the status only and is
// never held across I/O; it is the innermost lock of a node.
package worker
