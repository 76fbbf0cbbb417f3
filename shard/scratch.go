package shard

import (
	"sync"
	"time"
)

// The float32 buffers of an Apply (params.grad, params.sum) and of a
// leader's group sum (groupSum) come from one bounded free list per
// process (docs/design.md, "Scratch buffers"); buffers keep no state
// between Applies.
var scratch = &scratchPool{keep: 2}

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

// snapshotMem bounds the bytes of snapshot encodings this process holds
// at once (FSM.Snapshot until Release): 32 MiB, or one encoding of any
// size when none is held, so a small model's replicas snapshot side by
// side and a large one's one after the other.
var snapshotMem = newByteBudget(32 << 20)

// byteBudget is a counting semaphore over bytes that always admits a
// request when nothing is held. Safe for concurrent use; a leaf lock.
type byteBudget struct {
	limit int64

	mu   sync.Mutex
	cond *sync.Cond
	held int64
}

func newByteBudget(limit int64) *byteBudget {
	b := &byteBudget{limit: limit}
	b.cond = sync.NewCond(&b.mu)
	return b
}

// acquire takes n bytes, waiting while others hold too many, but no
// longer than snapshotMemWait: the budget saves memory, it must never
// stall a replica for good (raft releases every snapshot it took, but a
// bound costs nothing).
func (b *byteBudget) acquire(n int64) {
	deadline := time.Now().Add(snapshotMemWait)
	t := time.AfterFunc(snapshotMemWait, func() {
		b.mu.Lock()
		b.mu.Unlock() // a waiter is either before its check or in Wait
		b.cond.Broadcast()
	})
	defer t.Stop()
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.held > 0 && b.held+n > b.limit && time.Now().Before(deadline) {
		b.cond.Wait()
	}
	b.held += n
}

const snapshotMemWait = 10 * time.Second

func (b *byteBudget) release(n int64) {
	b.mu.Lock()
	b.held -= n
	b.mu.Unlock()
	b.cond.Broadcast()
}
