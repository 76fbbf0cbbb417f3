package shard

import (
	"sync"

	"dsspmesh/shardapi"
)

// The faultinject build's broken reply cache (faults.StaleRead): each FSM
// keeps one copy of its parameters and serves it, with its version, until
// the state is staleReadEntries applied entries past it. Normal builds never
// call staleSlice (faults.On is the constant false).

const staleReadEntries = 256

type staleCopy struct {
	theta []float32
	v     shardapi.Version
}

var (
	staleMu     sync.Mutex
	staleCopies = map[*FSM]*staleCopy{}
)

// staleSlice returns the cached copy, encoded in the wire precision, and
// its version, refreshing the copy first when it is staleReadEntries
// behind; f.mu is held (read).
func (f *FSM) staleSlice() ([]byte, shardapi.Version) {
	staleMu.Lock()
	defer staleMu.Unlock()
	c := staleCopies[f]
	if c == nil || len(c.theta) != len(f.theta) || f.lastIndex >= c.v.Index+staleReadEntries || f.lastIndex < c.v.Index {
		c = &staleCopy{theta: append([]float32(nil), f.theta...), v: f.versionLocked()}
		staleCopies[f] = c
	}
	return f.spec.Precision.Params().Append(nil, c.theta), c.v
}
