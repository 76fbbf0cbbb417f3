package shard

import (
	"sync"
	"time"

	"dsspmesh/mesh"
)

// refusalLogEvery is how often the refusal of one peer's raft streams is
// logged again. A replica removed from the shard that still runs (its node
// cut off when the leader removed it, so it never learnt) pre-votes every
// election timeout for as long as it runs; a warning per attempt buried
// everything else in the log of every replica it asked.
const refusalLogEvery = time.Minute

// refusals rate-limits the warning of allowRaftPeer per peer: the first
// refusal is logged, then at most one per refusalLogEvery, counting those
// left out since.
type refusals struct {
	mu   sync.Mutex
	seen map[mesh.NodeID]*refused // guarded by mu
}

type refused struct {
	logged time.Time // when the last warning was written
	quiet  int       // refusals since, not logged
}

// note records a refusal of peer at now and reports whether to log it,
// with how many refusals of peer went unlogged before it.
func (r *refusals) note(peer mesh.NodeID, now time.Time) (log bool, unlogged int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[mesh.NodeID]*refused{}
	}
	p := r.seen[peer]
	if p == nil {
		r.seen[peer] = &refused{logged: now}
		return true, 0
	}
	if now.Sub(p.logged) < refusalLogEvery {
		p.quiet++
		return false, 0
	}
	unlogged = p.quiet
	p.logged, p.quiet = now, 0
	return true, unlogged
}
