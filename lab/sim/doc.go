// Package sim is a discrete-event simulator of N workers pushing through a
// clock.Gate, for studying the paradigms at scales no local mesh reaches.
//
// Each worker computes (a duration drawn from its own [Model]), pushes,
// and waits for the gate's release; a release reaches the worker one
// round-trip latency after the gate decided. Time is simulated in int64
// nanoseconds; nothing reads the wall clock. A run is deterministic for a
// given Config: each worker draws from its own math/rand/v2 stream seeded by
// (Seed, worker index), so every paradigm sees the same compute times
// (common random numbers) and differences are the gate's alone.
//
// A run stops when the gate has applied Workers×Iters pushes in total: Iters
// is the mean number of iterations per worker, not a per-worker quota, so
// fast workers do more of them than slow ones where the paradigm lets them.
// Throughput is pushes applied per simulated second.
//
// [RunBalance] runs the same mesh with the balance layer of package
// balance (or, for comparison, without it) and counts samples instead of
// pushes: a batch of b takes Overhead + draw·b/Base, each push is
// observed by a balance.Balancer, Decide runs each time t_min rises, and a
// new allocation is in force from t_max + 1 on. Utilisation is samples /
// (time × Σ speeds).
//
// Run and RunBalance hold no shared state: concurrent runs are independent
// (dssp-lab sim runs its paradigms in parallel; the results do not depend on
// it).
//
// Cost: Run's wall time per push is the gate's push (through
// clock.Gate.PushSlotInto: no lookup by id, no Outcome copied, the
// releases' array reused), one pop and one push of a calendar queue
// (calendar.go: buckets of one time slot each, about one mean gap between
// pushes wide, found through a bitmap; O(1) and allocation-free in a
// steady run, and the same order of events as a heap on (at, seq)) and one
// draw. The results of a Config are pinned by golden_test.go; BenchmarkRun
// prints ns/push at 1024 workers.
package sim
