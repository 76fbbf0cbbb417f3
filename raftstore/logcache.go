package raftstore

import (
	"fmt"
	"slices"
	"sync"

	"github.com/hashicorp/raft"
)

// byteCache keeps the newest log entries in memory in front of a log store,
// as raft.LogCache does, but bounded by the bytes of their data and
// extensions rather than by a count: a shard's entries are as large as its
// slice of the model (a quarter of a megabyte for the MLP, tens of
// megabytes for a 100 MB model), so a count that suits one pins gigabytes
// with the other. The cached entries are a run of consecutive indexes
// ending at the newest stored; an entry larger than the whole budget is not
// cached. Goroutine-safe; raft's log entries are not modified after they
// are stored, so cached pointers are shared as raft.LogCache shares them.
type byteCache struct {
	store    raft.LogStore
	maxBytes int64

	mu      sync.RWMutex
	entries []*raft.Log // consecutive indexes, oldest first
	bytes   int64
}

var _ raft.LogStore = (*byteCache)(nil)

func newByteCache(maxBytes int64, store raft.LogStore) (*byteCache, error) {
	if maxBytes <= 0 {
		return nil, fmt.Errorf("raftstore: log cache of %d bytes must be positive", maxBytes)
	}
	return &byteCache{store: store, maxBytes: maxBytes}, nil
}

func entryBytes(l *raft.Log) int64 { return int64(len(l.Data) + len(l.Extensions)) }

// IsMonotonic exposes the underlying store's (raft.MonotonicLogStore).
func (c *byteCache) IsMonotonic() bool {
	m, ok := c.store.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

func (c *byteCache) GetLog(idx uint64, log *raft.Log) error {
	c.mu.RLock()
	if n := len(c.entries); n > 0 {
		if first := c.entries[0].Index; idx >= first && idx-first < uint64(n) {
			*log = *c.entries[idx-first]
			c.mu.RUnlock()
			return nil
		}
	}
	c.mu.RUnlock()
	return c.store.GetLog(idx, log)
}

func (c *byteCache) StoreLog(log *raft.Log) error { return c.StoreLogs([]*raft.Log{log}) }

func (c *byteCache) StoreLogs(logs []*raft.Log) error {
	if err := c.store.StoreLogs(logs); err != nil {
		c.clear()
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range logs {
		if n := len(c.entries); n > 0 && l.Index != c.entries[n-1].Index+1 {
			// Not the next index (a conflicting suffix rewritten, or a gap
			// after a snapshot install): start the run over.
			c.entries, c.bytes = c.entries[:0], 0
		}
		c.entries = append(c.entries, l)
		c.bytes += entryBytes(l)
		for len(c.entries) > 0 && c.bytes > c.maxBytes {
			c.bytes -= entryBytes(c.entries[0])
			c.entries[0] = nil
			c.entries = c.entries[1:]
		}
	}
	if len(c.entries) == 0 {
		c.entries = nil // drop the backing array and what it pins
	}
	return nil
}

func (c *byteCache) clear() {
	c.mu.Lock()
	c.entries, c.bytes = nil, 0
	c.mu.Unlock()
}

func (c *byteCache) FirstIndex() (uint64, error) { return c.store.FirstIndex() }
func (c *byteCache) LastIndex() (uint64, error)  { return c.store.LastIndex() }

// DeleteRange drops the range's cached entries and then the range. Raft
// deletes a prefix when it compacts the log after a snapshot; dropping the
// whole cache there (as raft.LogCache does) made raft read the newest
// entry back from bbolt, decoding all its bytes for its term, every
// commit timeout per follower until the next entry was stored (10 GB in
// 4 minutes on a node of the 100 MB model's mesh).
func (c *byteCache) DeleteRange(min, max uint64) error {
	c.mu.Lock()
	c.dropLocked(min, max)
	c.mu.Unlock()
	return c.store.DeleteRange(min, max)
}

// dropLocked removes the cached entries with indexes in [min, max]: a
// prefix or a suffix of the cached run leaves the rest, a range inside it
// (which raft never deletes) empties the cache, so the run stays
// consecutive.
func (c *byteCache) dropLocked(min, max uint64) {
	n := len(c.entries)
	if n == 0 || min > max {
		return
	}
	first, last := c.entries[0].Index, c.entries[n-1].Index
	var keep []*raft.Log
	switch {
	case max < first || min > last:
		return
	case min <= first && max < last:
		keep = c.entries[max-first+1:]
	case min > first && max >= last:
		keep = c.entries[:min-first]
	}
	if len(keep) == 0 {
		c.entries, c.bytes = nil, 0
		return
	}
	c.entries = slices.Clone(keep) // drop the backing array and what it pins
	c.bytes = 0
	for _, l := range c.entries {
		c.bytes += entryBytes(l)
	}
}

// cachedBytes is the data the cache holds (for tests).
func (c *byteCache) cachedBytes() (int, int64) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.entries), c.bytes
}
