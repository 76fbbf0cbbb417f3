package shard

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"maps"
	"slices"
	"sync"

	"dsspmesh/internal/faults"
	"dsspmesh/mesh"
	"dsspmesh/shardapi"
)

// localCheck is the agreement check's replica-local part (not replicated
// state; docs/design.md, "Replicas agree"): this replica's id, its
// digests of the indices where its applied index crossed a multiple of
// every, the checks it settled and matched, and why it diverged (then it
// applies nothing more). The FSM holds one and calls it under its lock;
// onDiverge is called once, under that lock, when the replica diverges:
// it must not block.
type localCheck struct {
	self       mesh.NodeID
	every      uint64
	digests    digestRing
	ready      chan struct{} // signalled when a digest is added
	settled    uint64
	matched    uint64
	diverged   *shardapi.Divergence
	onDiverge  func(shardapi.Divergence)
	flipTarget mesh.NodeID // the faultinject build's flipped replica (flipOnce)
}

// compare is the agreement check on this replica after a check entry
// settled: it diverges when it digested the check's index too and its
// own digest differs from the one a majority of the voters sent. (A check
// that named this id is not enough: a replica rebuilt since replays it.)
func (c *localCheck) compare(st *state, h agreeHeader, out *shardapi.Applied) {
	a := &st.agree
	if h.Op != "check" || out.Kind != "check" || a.at != h.At {
		return
	}
	c.settled++
	if faults.On(faults.FlipState) && c.flipTarget == "" {
		c.flipTarget = mesh.NodeID(slices.Max(h.Servers)) // broken build only
	}
	if faults.On(faults.BlindAgreement) {
		return // broken build only: no comparison
	}
	if d, ok := c.digests.get(h.At); ok {
		if !bytes.Equal(d[:], a.digest) {
			c.diverge(shardapi.Divergence{At: h.At, Reason: fmt.Sprintf("its state digest at index %d differs from the one %d of the %d voters sent", h.At, agreedVoters(h, a.digest), h.Voters)}, out)
			return
		}
		c.matched++
	}
}

// diverge marks the replica diverged, puts d in out (if any) and tells
// onDiverge.
func (c *localCheck) diverge(d shardapi.Divergence, out *shardapi.Applied) {
	if c.diverged != nil {
		return
	}
	c.diverged = &d
	if out != nil {
		out.Diverged = &d
	}
	if c.onDiverge != nil {
		c.onDiverge(d)
	}
}

// digestAt digests st when applying index crossed a multiple of every
// since prev (the index applied before), and tells the leader's checker.
func (c *localCheck) digestAt(st *state, prev, index uint64) {
	k := c.every
	if k == 0 || !st.job.initialized || index/k == prev/k {
		return
	}
	if faults.On(faults.FlipState) {
		c.flipOnce(st) // broken build only
	}
	d, err := st.digest()
	if err != nil {
		return
	}
	c.digests.add(index, d)
	select {
	case c.ready <- struct{}{}:
	default:
	}
}

// view copies what the checker, the intake and the status read: this
// replica's part and the replicated agreement machine a.
func (c *localCheck) view(a *agreement) checkView {
	return checkView{
		diverged: c.diverged, digests: c.digests,
		named: maps.Clone(a.named), evicted: maps.Clone(a.evicted),
		status: shardapi.CheckStatus{At: a.at, Settled: c.settled, Matched: c.matched, Named: slices.Sorted(maps.Keys(a.named))},
	}
}

// checkView is the agreement check's state on a replica at one moment
// (FSM.check).
type checkView struct {
	diverged *shardapi.Divergence // why this replica diverged; nil while it has not
	digests  digestRing
	named    map[mesh.NodeID]uint64 // the servers a check named and not yet evicted
	evicted  map[mesh.NodeID]uint64 // the check that named each evicted server
	status   shardapi.CheckStatus
}

// digest is this replica's digest of index at, if it has one and has not
// diverged.
func (v checkView) digest(at uint64) ([sha256.Size]byte, bool) {
	if v.diverged != nil {
		return [sha256.Size]byte{}, false
	}
	return v.digests.get(at)
}

// digestRing keeps a replica's last digests.
type digestRing struct {
	at [8]uint64
	d  [8][sha256.Size]byte
	n  int
}

func (r *digestRing) add(at uint64, d [sha256.Size]byte) {
	i := r.n % len(r.at)
	r.at[i], r.d[i] = at, d
	r.n++
}

func (r digestRing) get(at uint64) ([sha256.Size]byte, bool) {
	for i := range r.at {
		if r.at[i] == at && at != 0 {
			return r.d[i], true
		}
	}
	return [sha256.Size]byte{}, false
}

// latest is the index of the newest digest, 0 if none.
func (r digestRing) latest() uint64 {
	if r.n == 0 {
		return 0
	}
	return r.at[(r.n-1)%len(r.at)]
}

// The faultinject build's flipped replica (faults.FlipState): at its first
// digest after the first settled check, the replica with the largest id
// among that check's servers flips the sign of its first parameter, once
// per shard per process (a rebuilt replica stays whole). Normal builds
// never call it.

var flipped sync.Map // shard → struct{}

func (c *localCheck) flipOnce(st *state) {
	if st.agree.at == 0 || len(st.params.theta) == 0 || c.self == "" || c.flipTarget != c.self {
		return
	}
	if _, done := flipped.LoadOrStore(st.shard, struct{}{}); done {
		return
	}
	if st.params.frozen != 0 {
		st.params.theta, st.params.velocity = slices.Clone(st.params.theta), slices.Clone(st.params.velocity)
		st.params.frozen = 0
	}
	st.params.theta[0] = -st.params.theta[0] - 1
}
