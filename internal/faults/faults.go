package faults

// Fault names one deliberate bug.
type Fault string

const (
	// AckUncommitted: the leader acknowledges some fresh pushes
	// (iter ≡ 5 mod 10) without ever proposing them — an OK before commit
	// that no replica applies. Caught as acknowledged pushes lost.
	AckUncommitted Fault = "ack-uncommitted"
	// SkipDedupe: a resent push already applied is applied again.
	// Caught as a push applied twice and a clock going back.
	SkipDedupe Fault = "skip-dedupe"
	// SkipStaleness: the gate's hold is ignored — the FSM records a
	// held push as released and the leader acknowledges it. Caught as an
	// OK with gap > s_U and a gate replay that disagrees.
	SkipStaleness Fault = "skip-staleness"
	// Diverge: each replica drops one gradient in 16 at random, so
	// replicas applying the same entries diverge. Caught by the state hashes.
	Diverge Fault = "diverge"
	// SplitBrain: a joining node bootstraps every shard's Raft group on
	// its own (honoured by node). Caught as two leaders in one term.
	SplitBrain Fault = "split-brain"
	// SkipNonFinite: neither the leader nor the FSM refuses a NaN or ±Inf
	// gradient or a step that makes a parameter non-finite. Caught by the
	// parameters-finite checker once a worker sends NaN.
	SkipNonFinite Fault = "skip-non-finite"
	// StaleRead: the leader answers a push with the parameter slice it
	// read up to 256 applied entries earlier (a broken reply cache), under
	// that slice's own version. Caught by the reads-within-the-bound
	// checker: an iteration computed on parameters older than s_U allows.
	StaleRead Fault = "stale-read"
	// KeepLeaverShare: under the balance layer, a worker taken out of
	// shard 0's clock table (removed or suspended) keeps its share of the
	// global batch, which then goes unread. Caught by the shares checker
	// as iterations short of their global batch long after the worker
	// left.
	KeepLeaverShare Fault = "keep-leaver-share"
	// OverlapShares: under the balance layer, every worker's share of an
	// iteration starts at the global batch's first position, so the
	// workers read the same samples. Caught by the shares checker's
	// tiling.
	OverlapShares Fault = "overlap-shares"
	// ForgetRemovedMax: under the balance layer, an allocation decided
	// when the worker at the gate's t_max is removed comes in force from
	// the lowered t_max+1, cutting the others' shares of iterations whose
	// shares the removed worker was already named (the bug a chaos run
	// caught). Caught by the shares checker's tiling when the removed
	// worker's last pushes were acknowledged.
	ForgetRemovedMax Fault = "forget-removed-max"
	// FlipState: once per shard per process, the replica with the largest
	// id among the servers of its shard's first settled agreement check
	// flips one parameter of its state (a bit flipped in memory). Not a
	// bug of the product but a replica that diverged: the agreement check
	// names it and its node rebuilds it, which the agreement checker
	// requires.
	FlipState Fault = "flip-state"
	// BlindAgreement: agreement checks name no replica and replicas
	// compare nothing with them, so a diverged replica goes on voting and
	// serving unnamed. Caught by the agreement checker with FlipState on.
	BlindAgreement Fault = "blind-agreement"
)
