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
// otherwise one that records nothing. Under the combine rule mean a
// built-in worker pushes the change of one step of its own optimizer
// ([Own], own.go: the batch's gradient, mixed first under --pipeline's
// split, turned into lr·v piece by piece as it is encoded), an external
// trainer the change of its own; the velocity is the worker's, its rate
// from the samples applied mesh-wide that the last OKs named.
//
// # Decisions
//
// What the loop does after a reply, a re-add, a whole push settling or an
// align round is decided by [Step] (step.go), a pure state machine over
// the clocks per shard, the slices' versions and the refusals in a row:
// inputs in, decisions out, no I/O and no clock. The loop does the I/O each
// decision names; only its methods write its state. step_test.go replays
// the golden transcripts testdata/step_*.txt through it (an iteration, a
// push, replies, a gate hold, a re-add, a leader change, a join, slices
// landed and lent).
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
// # Local rounds
//
// With Config.LocalSteps H > 1 (the job's --local-steps) an iteration is a
// round: Next loads the round's samples (the job's batch × H, or the
// balance layer's share, taken in steps of about the job's batch, so a
// faster worker's larger share is more local steps), and the Compute
// hands over the round's pseudo-gradient θ_start − θ_local, encoded,
// error-fed and pushed as a gradient is: one push, one clock tick, the
// gates, the Step machine and the read guarantee as they are. The
// push's samples are the round's and its compute_ns the round's time, so
// the DSSP controller and the balancer time rounds. [LocalRounds] is the
// built-in models' inner loop (sgd or adam); an external trainer runs its
// own. Under the balance layer a round whose assignment carries no
// predicted time (the balancer has not modelled the worker yet) is a probe
// of 2 steps, so the first rounds time every worker without the others
// waiting on the slowest one's full round (balance.go). Under --pipeline a round splits at a step boundary: its first steps
// run while the push before is in flight and their progress is carried
// onto the θ that push brings (pipeline.go).
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
// (LocalWorker.Stopped, logged at error), as a diverged evaluation stops
// it ([Worker.Stop]).
//
// # Stopping
//
// A worker that stops itself while its node runs on (20 refusals in a
// row, a failure of its own compute, a diverged evaluation) leaves every
// shard's gate before [Worker.Run] returns, as a leaving worker does
// (shardapi.Client.RemoveWorker, within Config.LeaveTimeout): its node
// stays up and alive, so no failure detection or suspicion would ever
// take out its clock, which would hold every other worker at the
// staleness bound for the rest of the run. A worker stopped by a
// mesh-wide condition (a diverged job) leaves too: nothing waits for a
// stopped worker, and a node that does not see the divergence trains on.
// [Worker.Leave] at shutdown then only closes the shard clients.
//
// # Concurrency
//
// [Worker.Run] is one goroutine; each push starts one goroutine per shard
// and waits for them (under --pipeline, while the loop computes the next
// gradient). [Worker.Status], [Worker.Stop], [Worker.Borrow] and
// [Worker.Finished] are safe for concurrent use; [Worker.Leave] is called
// once, after Run's ctx ended or the worker stopped (it waits for Run to
// return; Worker.left, written by Run before it returns, tells it whether
// the worker left the gates already). Worker.mu guards the status only and is
// never held across I/O; it is the innermost lock of a node.
package worker
