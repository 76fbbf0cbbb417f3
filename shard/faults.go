package shard

// Fault is a deliberate bug that the fault-injection checkers of test/ must
// catch. Faults exist only in binaries built with -tags faultinject, where
// the DSSP_FAULTS environment variable (a comma-separated list of names)
// switches them on; in every other build faultOn is the constant false and
// the code behind it is compiled out.
type Fault string

const (
	// FaultAckUncommitted: the leader acknowledges some fresh pushes
	// (iter ≡ 5 mod 10) without ever proposing them — an OK before commit
	// that no replica applies. Caught as acknowledged pushes lost.
	FaultAckUncommitted Fault = "ack-uncommitted"
	// FaultSkipDedupe: a resent push already applied is applied again.
	// Caught as a push applied twice and a clock going back.
	FaultSkipDedupe Fault = "skip-dedupe"
	// FaultSkipStaleness: the gate's hold is ignored — the FSM records a
	// held push as released and the leader acknowledges it. Caught as an
	// OK with gap > s_U and a gate replay that disagrees.
	FaultSkipStaleness Fault = "skip-staleness"
	// FaultDiverge: each replica drops one gradient in 16 at random, so
	// replicas applying the same entries diverge. Caught by the state hashes.
	FaultDiverge Fault = "diverge"
	// FaultSplitBrain: a joining node bootstraps every shard's Raft group
	// on its own (checked by node). Caught as two leaders in one term.
	FaultSplitBrain Fault = "split-brain"
	// FaultSkipNonFinite: neither the leader nor the FSM refuses a NaN or
	// ±Inf gradient or a step that makes a parameter non-finite. Caught by
	// the parameters-finite checker once a worker sends NaN.
	FaultSkipNonFinite Fault = "skip-non-finite"
)

// FaultActive reports whether f is switched on (always false unless built
// with -tags faultinject).
func FaultActive(f Fault) bool { return faultOn(f) }
