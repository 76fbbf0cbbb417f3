package raftstore

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

func entry(i uint64, n int) *raft.Log {
	return &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: bytes.Repeat([]byte{byte(i)}, n)}
}

// TestByteCacheBoundedByBytes: the cache holds the newest consecutive
// entries within its byte budget, none larger than it, forgets a rewritten
// suffix, and every read matches the store's.
func TestByteCacheBoundedByBytes(t *testing.T) {
	store := raft.NewInmemStore()
	c, err := newByteCache(1000, store)
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 20; i++ {
		if err := c.StoreLogs([]*raft.Log{entry(i, 300)}); err != nil {
			t.Fatal(err)
		}
	}
	if n, b := c.cachedBytes(); n != 3 || b != 900 {
		t.Fatalf("cache holds %d entries, %d bytes; want 3, 900", n, b)
	}
	if err := c.StoreLogs([]*raft.Log{entry(21, 5000)}); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.cachedBytes(); n != 0 {
		t.Fatalf("an entry over the budget left %d cached", n)
	}
	// A conflicting suffix from index 19 replaces the cached run.
	store.DeleteRange(19, 21)
	if err := c.StoreLogs([]*raft.Log{entry(19, 10), entry(20, 10)}); err != nil {
		t.Fatal(err)
	}
	readsAsStore(t, c, store, 1, 20)
}

// readsAsStore fails t unless c reads entries from..to as store does.
func readsAsStore(t *testing.T, c *byteCache, store raft.LogStore, from, to uint64) {
	t.Helper()
	for i := from; i <= to; i++ {
		var a, b raft.Log
		if err := c.GetLog(i, &a); err != nil {
			t.Fatal(err)
		}
		store.GetLog(i, &b)
		if a.Index != b.Index || !bytes.Equal(a.Data, b.Data) {
			t.Fatalf("entry %d from the cache differs from the store's", i)
		}
	}
}

// TestByteCacheDeleteRange: deleting a prefix of the log (a compaction)
// or a suffix (a conflicting leader's) keeps the rest of the cached run,
// which reads as the store does; a range inside the run empties the cache.
func TestByteCacheDeleteRange(t *testing.T) {
	store := raft.NewInmemStore()
	c, err := newByteCache(1<<20, store)
	if err != nil {
		t.Fatal(err)
	}
	fill := func(from, to uint64) {
		t.Helper()
		for i := from; i <= to; i++ {
			if err := c.StoreLogs([]*raft.Log{entry(i, 100)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	fill(1, 6)
	for _, tc := range []struct {
		min, max uint64
		want     int
	}{
		{1, 3, 3}, // compaction: 4..6 stay
		{1, 2, 3}, // before the cached run: nothing changes
		{6, 9, 2}, // a suffix: 4..5 stay
		{1, 5, 0}, // the whole run
	} {
		if err := c.DeleteRange(tc.min, tc.max); err != nil {
			t.Fatal(err)
		}
		if n, b := c.cachedBytes(); n != tc.want || b != int64(100*tc.want) {
			t.Fatalf("after DeleteRange(%d, %d) the cache holds %d entries, %d bytes; want %d", tc.min, tc.max, n, b, tc.want)
		}
	}
	fill(1, 6)
	if err := c.DeleteRange(3, 4); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.cachedBytes(); n != 0 {
		t.Fatalf("a range inside the cached run left %d entries cached", n)
	}
	fill(7, 8) // after 6, which the store still holds
	readsAsStore(t, c, store, 1, 2)
	readsAsStore(t, c, store, 5, 8)
}

// TestOpenCompactsASparseLog: a log database that once held far more than
// it does now is rewritten compactly on Open, and keeps every entry and
// stable value.
func TestOpenCompactsASparseLog(t *testing.T) {
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.CompactAt = 1 << 20
	s, err := Open(dir, 3, cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 40; i++ {
		if err := s.Log.StoreLogs([]*raft.Log{entry(i, 256<<10)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Log.DeleteRange(1, 36); err != nil {
		t.Fatal(err)
	}
	if err := s.Stable.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatal(err)
	}
	s.Close()
	path := filepath.Join(ShardDir(dir, 3), "raft.db")
	before, _ := os.Stat(path)
	s, err = Open(dir, 3, cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	after, _ := os.Stat(path)
	t.Logf("raft.db %d bytes before, %d after", before.Size(), after.Size())
	if after.Size()*2 > before.Size() {
		t.Fatalf("raft.db %d bytes after Open, %d before: not compacted", after.Size(), before.Size())
	}
	first, _ := s.Log.FirstIndex()
	last, _ := s.Log.LastIndex()
	if first != 37 || last != 40 {
		t.Fatalf("log [%d, %d] after compaction, want [37, 40]", first, last)
	}
	var l raft.Log
	if err := s.Log.GetLog(39, &l); err != nil || !bytes.Equal(l.Data, entry(39, 256<<10).Data) {
		t.Fatalf("entry 39 after compaction: %v", err)
	}
	if v, err := s.Stable.GetUint64([]byte("CurrentTerm")); err != nil || v != 7 {
		t.Fatalf("CurrentTerm %d, %v after compaction", v, err)
	}
	if _, err := os.Stat(path + ".compact"); !os.IsNotExist(err) {
		t.Fatalf("the compaction's copy is left: %v", err)
	}
}

// TestBoltLogReadsRaftBoltDBFiles: a log written by hashicorp/raft-boltdb
// (what this package used before) opens with boltLog with every entry and
// stable value, and boltLog's files open with raft-boltdb.
func TestBoltLogReadsRaftBoltDBFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raft.db")
	old, err := raftboltdb.NewBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 5; i++ {
		if err := old.StoreLog(entry(i, 5000)); err != nil {
			t.Fatal(err)
		}
	}
	old.SetUint64([]byte("CurrentTerm"), 9)
	old.Close()
	b, err := openBoltLog(path, boltOptions(DefaultConfig()))
	if err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	if err := b.GetLog(3, &l); err != nil || l.Index != 3 || !bytes.Equal(l.Data, entry(3, 5000).Data) {
		t.Fatalf("entry 3 written by raft-boltdb: %+v, %v", l.Index, err)
	}
	if v, err := b.GetUint64([]byte("CurrentTerm")); err != nil || v != 9 {
		t.Fatalf("CurrentTerm %d, %v", v, err)
	}
	if _, err := b.Get([]byte("nope")); err == nil || err.Error() != "not found" {
		t.Fatalf("missing key: %v (raft expects \"not found\")", err)
	}
	if err := b.StoreLog(entry(6, 7000)); err != nil {
		t.Fatal(err)
	}
	b.Close()
	old, err = raftboltdb.NewBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := old.GetLog(6, &l); err != nil || !bytes.Equal(l.Data, entry(6, 7000).Data) {
		t.Fatalf("entry 6 written by boltLog, read by raft-boltdb: %v", err)
	}
}

// TestBoltLogMixesSmallAndLargeEntries: an index rewritten from a small to
// a large entry and back reads as the latest, and DeleteRange and the
// index bounds see both forms.
func TestBoltLogMixesSmallAndLargeEntries(t *testing.T) {
	b, err := openBoltLog(filepath.Join(t.TempDir(), "raft.db"), boltOptions(DefaultConfig()))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sizes := []int{10, bigEntry * 2, 10, bigEntry * 3, 100}
	for i, n := range sizes {
		if err := b.StoreLog(entry(uint64(i+1), n)); err != nil {
			t.Fatal(err)
		}
	}
	// A conflicting suffix rewrites 2 (large → small) and 3 (small → large).
	if err := b.StoreLogs([]*raft.Log{entry(2, 20), entry(3, bigEntry*2)}); err != nil {
		t.Fatal(err)
	}
	want := map[uint64]int{1: 10, 2: 20, 3: bigEntry * 2, 4: bigEntry * 3, 5: 100}
	for i, n := range want {
		var l raft.Log
		if err := b.GetLog(i, &l); err != nil || !bytes.Equal(l.Data, entry(i, n).Data) {
			t.Fatalf("entry %d: %d bytes, %v; want %d", i, len(l.Data), err, n)
		}
	}
	if err := b.DeleteRange(1, 3); err != nil {
		t.Fatal(err)
	}
	first, _ := b.FirstIndex()
	last, _ := b.LastIndex()
	if first != 4 || last != 5 {
		t.Fatalf("index range [%d, %d] after DeleteRange(1, 3), want [4, 5]", first, last)
	}
	var l raft.Log
	if err := b.GetLog(3, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("deleted entry 3: %v", err)
	}
}
