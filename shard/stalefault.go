package shard

import (
	"sync"

	"dsspmesh/shardapi"
)

// The faultinject build's broken reply cache (faults.StaleRead): each FSM
// keeps one copy of its parameters and serves it, with its version, until
// the state is staleReadEntries applied entries past it. Normal builds never
// call it (faults.On is the constant false).

const staleReadEntries = 256

type staleCache struct {
	mu    sync.Mutex
	theta []float32
	v     shardapi.Version
}

// slice returns the cached copy, encoded in prec, and its version,
// refreshing the copy from theta (at version cur) first when it is
// staleReadEntries behind.
func (c *staleCache) slice(theta []float32, prec shardapi.Precision, cur shardapi.Version) ([]byte, shardapi.Version) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.theta == nil || len(c.theta) != len(theta) || cur.Index >= c.v.Index+staleReadEntries || cur.Index < c.v.Index {
		c.theta, c.v = append([]float32(nil), theta...), cur
	}
	return prec.Append(nil, c.theta), c.v
}
