// Package clock holds the per-worker vector clocks and the synchronization
// paradigms (BSP, ASP, SSP, DSSP and the paper-literal DSSP) as pure,
// deterministic gate logic, plus the DSSP synchronization controller.
//
// # What it owns
//
//   - [Table]: a vector clock table (one iteration counter per worker) with
//     O(1) min/max kept by a histogram of clocks.
//   - [Policy]: which paradigm and its parameters; [ParsePolicy] reads the
//     text form ("bsp", "asp", "ssp:3", "dssp:3:12", "dssp-paper:3:12",
//     optionally suffixed ":wait" or ":abs" for the DSSP objective).
//     [Policy.Pipelined] is the policy a gate releases by when workers
//     compute one iteration ahead (a job's --pipeline): s_L one lower, so
//     reads stay within the job's own bound; the gate itself is unchanged.
//   - [Gate]: the decision logic of one shard leader: on every applied push it
//     says whether the pusher is released now and which waiting workers this
//     push released. The exact rules are docs/design.md#the-gate-rules;
//     divergences from the DSSP paper are in docs/divergence.md.
//   - [SyncController]: the paper's Algorithm 2 as a pure function.
//
// # Contract
//
// Time is an input: every push carries its receipt time in int64
// nanoseconds (the shard leader writes it into the Raft entry). Nothing here
// reads the system clock, draws random numbers or iterates a Go map where
// the order could reach a decision or an encoding, so the same sequence of
// calls gives the same decisions, the same state and the same bytes from
// [Gate.MarshalBinary] on every machine. That is what lets a Gate live in a
// Raft FSM: replicas that apply the same entries agree, and a new leader
// restored from a snapshot continues with identical decisions.
//
// A Gate is not safe for concurrent use; the owner (the FSM) serialises
// calls. No method blocks. Slices returned by a Gate are freshly allocated
// and owned by the caller.
//
// # Pushes
//
// A worker's clock t_w is the number of its pushes applied (0-based
// iteration of its next push). A push for iteration iter is accepted only if
// iter == t_w; afterwards t_w = iter+1. A push with iter < t_w is a
// [*DuplicatePushError] (a resend: the caller acknowledges it without
// applying it again, or keeps withholding the reply while
// [Gate.IsWaiting] says so); iter > t_w is a [*FuturePushError]; an unknown
// worker is a [*UnknownWorkerError]; a push of iteration t_w by a worker
// whose previous push is still held is [ErrWorkerWaiting]. A rejected call
// leaves the state unchanged. Bad input never panics.
//
// Receipt times need not be monotone across leaders: a push received
// earlier than the worker's previous push is recorded at the previous
// push's time, so push intervals are never negative.
//
// # Workers
//
// [Gate.AddWorker] places a worker at t_min with no timestamps and no
// grant. [Gate.AdvanceWorker] only moves a clock forward (the iterations
// skipped count as empty; a held push of the worker is dropped).
// [Gate.RemoveWorker] drops the worker and its held push without releasing
// it. Both return the waiting workers that the rise of t_min released.
//
// # Cost
//
// A call costs one map lookup on the worker's id: workers are interned to
// dense indices, and their timestamps, grants and held pushes live in
// slices by index (indices are internal and never reach a decision or an
// encoding). [Gate.PushSlot] skips even that lookup for a caller that
// keeps each worker's [Slot] (the simulator), and [Gate.PushSlotInto]
// writes into the caller's Outcome, reusing its Others array, so a steady
// caller allocates nothing and copies no Outcome. The clock table keeps the workers in buckets by clock, the
// non-empty buckets in a list sorted by clock, and each worker a pointer
// to its bucket, so a push moves the worker to the next bucket with no
// lookup; held pushes sit in their bucket's wait list. A push costs O(1)
// in the number of workers (emptied buckets are reused, so a steady run
// allocates only the Others it returns), plus ordering the workers it
// releases (by a rank of their ids, rebuilt after a worker joined or
// left), plus, when the DSSP controller runs, O(r_max) for the controller.
// The slowest worker at t_min is cached: it is found by a scan of the
// workers at t_min only when t_min rose, a worker was added there, or the
// cached one left. Adding a worker between the min and max clock walks the
// bucket list (O(distinct clocks)).
package clock
