// Package balance sizes each worker's mini-batch to its measured speed so
// that, under any gate, every worker finishes an iteration at about the
// same time while the global batch B = Σ b_i stays fixed. It is the
// balance layer of docs/design.md#balance: pure, deterministic decision
// logic; the shard FSM hosts it as replicated state, `dssp-lab sim --balance`
// runs it against simulated workers.
//
// # What it owns
//
//   - [Model]: one worker's affine time model t(b) = A + P·b (nanoseconds,
//     b samples), and [Window], the last few (samples, compute_ns)
//     observations from which [Window.Fit] estimates it robustly: P is a
//     median of per-sample times, so one jittered or outlying iteration
//     moves nothing and a lasting change of speed wins once it fills half
//     the window; A comes from a Theil–Sen slope over observations whose
//     batches differ enough to separate it from P, and is kept otherwise.
//   - [Allocate]: the allocator. Given the models, B and per-worker bounds
//     it returns integer batches with Σ = B, b_min ≤ b_i ≤ b_max, that
//     minimise the slowest predicted finish max_i t_i(b_i): the continuous
//     equal-finish solution (workers past a bound pinned there), floored,
//     then the remaining samples one by one to the worker that would finish
//     earliest with one more (optimal for non-decreasing times). With A = 0
//     it reduces to b_i ∝ 1/P_i, the worker's speed.
//   - [Balancer]: membership, one [Window] per worker, the current
//     allocation (versioned) and the damping: re-allocation at most every
//     Interval rounds, only when the predicted gain in the slowest finish
//     exceeds DeadBand and, below Rapid, NoiseBand × the largest relative
//     standard error of the fits ([Model].Noise: a gain inside the fits'
//     own noise is none), by a partial step η toward the optimum that halves
//     on any reversal (down to MinStep), and a full step when the imbalance
//     exceeds Rapid (a worker that slowed down, joined or left). An
//     allocation made blind (a worker without a model of its own: the
//     first, a joiner's) is replaced by the modelled optimum at the first
//     Decide at which every worker has a model, whatever the gain, so its
//     predictions are in the next version ([Assignment].PredictNs, 0 while
//     blind: under local rounds a worker probes until it has one).
//
// # Contract
//
// Time is an input: observations carry compute_ns as measured by the
// worker; nothing here reads a clock, draws random numbers or iterates a Go
// map where the order could reach a decision or an encoding. Products that
// reach a decision are rounded explicitly to float64 so no architecture
// fuses them into FMAs. The same sequence of calls therefore gives the same
// allocations and the same bytes from [Balancer.MarshalBinary] on every
// machine: replicas of a Raft FSM that apply the same entries agree, and a
// new leader restored from a snapshot decides identically.
//
// A Balancer is not safe for concurrent use; its owner serialises calls.
// Nothing blocks. Returned slices are fresh and owned by the caller. Bad
// input (an unknown worker, a non-positive time) is ignored or returned as
// an error, never a panic; [Balancer.UnmarshalBinary] refuses malformed
// bytes without allocating beyond their size.
package balance
