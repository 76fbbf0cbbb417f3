package shard

import "sync"

// The FSMs of one process borrow their per-Apply float32 buffers (a push
// entry's decoded gradient and the sum of those accepted) from one bounded
// free list instead of each keeping its own: a replica holds them only
// while it applies a push entry, so a node hosting G replicas of a 100 MB
// model's shards keeps a few slices' worth of scratch rather than 2·G (at
// 8 shards of 12.5 MB and 6 replicas a node, 50 MB instead of 150 MB).
// Buffers keep no state between Applies: every Apply writes a buffer
// before it reads it.
var scratch = &scratchPool{keep: 4}

// scratchPool is a free list of at most keep buffers. Safe for concurrent
// use; its lock is a leaf (taken under an FSM's lock, never the other way).
type scratchPool struct {
	keep int

	mu   sync.Mutex
	free [][]float32
}

// scratchRound rounds capacities up so that the shards of one model, whose
// lengths differ by at most one, share buffers.
const scratchRound = 1 << 12

// get returns a buffer of length n (contents undefined).
func (p *scratchPool) get(n int) []float32 {
	p.mu.Lock()
	for i := len(p.free) - 1; i >= 0; i-- {
		if b := p.free[i]; cap(b) >= n && cap(b) <= 2*n+scratchRound {
			p.free[i] = p.free[len(p.free)-1]
			p.free = p.free[:len(p.free)-1]
			p.mu.Unlock()
			return b[:n]
		}
	}
	p.mu.Unlock()
	return make([]float32, n, (n+scratchRound-1)/scratchRound*scratchRound)
}

// put gives b back; beyond keep buffers it is left to the collector, the
// smallest first.
func (p *scratchPool) put(b []float32) {
	if cap(b) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) < p.keep {
		p.free = append(p.free, b)
		return
	}
	small := 0
	for i, f := range p.free {
		if cap(f) < cap(p.free[small]) {
			small = i
		}
	}
	if cap(p.free[small]) < cap(b) {
		p.free[small] = b
	}
}
