package raftstore

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"dsspmesh/internal/testlogger"
)

func testLogger(t *testing.T) *slog.Logger { return testlogger.New(t, slog.LevelWarn) }

// exerciseStores checks the part of the store contract raft relies on,
// against any implementation.
func exerciseStores(t *testing.T, s *Stores) {
	t.Helper()
	var logs []*raft.Log
	for i := uint64(1); i <= 100; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1 + i/50, Type: raft.LogCommand, Data: bytes.Repeat([]byte{byte(i)}, int(i))})
	}
	if err := s.Log.StoreLogs(logs); err != nil {
		t.Fatalf("StoreLogs: %v", err)
	}
	first, _ := s.Log.FirstIndex()
	last, _ := s.Log.LastIndex()
	if first != 1 || last != 100 {
		t.Fatalf("index range = [%d, %d], want [1, 100]", first, last)
	}
	var got raft.Log
	if err := s.Log.GetLog(42, &got); err != nil {
		t.Fatalf("GetLog(42): %v", err)
	}
	if got.Term != 1 || !bytes.Equal(got.Data, bytes.Repeat([]byte{42}, 42)) {
		t.Fatalf("GetLog(42) = term %d, %d bytes; want term 1, 42 bytes of 42", got.Term, len(got.Data))
	}
	// raft truncates the head after a snapshot.
	if err := s.Log.DeleteRange(1, 60); err != nil {
		t.Fatalf("DeleteRange: %v", err)
	}
	if first, _ = s.Log.FirstIndex(); first != 61 {
		t.Fatalf("FirstIndex after truncation = %d, want 61", first)
	}
	// raft never reads below FirstIndex, so only the reported range is
	// checked.

	if err := s.Stable.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatalf("SetUint64: %v", err)
	}
	if err := s.Stable.Set([]byte("LastVoteCand"), []byte("node-b")); err != nil {
		t.Fatalf("Set: %v", err)
	}

	sink, err := s.Snapshots.Create(raft.SnapshotVersionMax, 100, 2, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatalf("snapshot Create: %v", err)
	}
	if _, err := sink.Write([]byte("fsm state")); err != nil {
		t.Fatalf("snapshot Write: %v", err)
	}
	if err := sink.Close(); err != nil {
		t.Fatalf("snapshot Close: %v", err)
	}
}

// checkPersisted reads back what exerciseStores wrote.
func checkPersisted(t *testing.T, s *Stores) {
	t.Helper()
	first, _ := s.Log.FirstIndex()
	last, _ := s.Log.LastIndex()
	if first != 61 || last != 100 {
		t.Fatalf("index range after reopen = [%d, %d], want [61, 100]", first, last)
	}
	if v, err := s.Stable.GetUint64([]byte("CurrentTerm")); err != nil || v != 7 {
		t.Fatalf("CurrentTerm after reopen = %d, %v; want 7", v, err)
	}
	if v, err := s.Stable.Get([]byte("LastVoteCand")); err != nil || string(v) != "node-b" {
		t.Fatalf("LastVoteCand after reopen = %q, %v; want node-b", v, err)
	}
	metas, err := s.Snapshots.List()
	if err != nil || len(metas) != 1 || metas[0].Index != 100 {
		t.Fatalf("snapshots after reopen = %+v, %v; want one at index 100", metas, err)
	}
	_, rc, err := s.Snapshots.Open(metas[0].ID)
	if err != nil {
		t.Fatalf("snapshot Open: %v", err)
	}
	defer rc.Close()
	if b, _ := io.ReadAll(rc); string(b) != "fsm state" {
		t.Fatalf("snapshot content = %q, want %q", b, "fsm state")
	}
}

func TestInmemStores(t *testing.T) {
	s := NewInmem()
	exerciseStores(t, s)
	checkPersisted(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestDiskStoresSurviveReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, 3, DefaultConfig(), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	exerciseStores(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}

	s, err = Open(dir, 3, DefaultConfig(), testLogger(t))
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	checkPersisted(t, s)
	if _, err := os.Stat(filepath.Join(ShardDir(dir, 3), "raft.db")); err != nil {
		t.Fatalf("log database not where documented: %v", err)
	}
}

func TestOpenNamesUnusableFolder(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "shards")
	if err := os.WriteFile(blocker, []byte("not a folder"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Open(dir, 1, DefaultConfig(), testLogger(t))
	if err == nil || !strings.Contains(err.Error(), "shard 1") || !strings.Contains(err.Error(), dir) {
		t.Fatalf("Open over a file: err = %v, want one naming shard 1 and %s", err, dir)
	}
}

func TestConfigValidateNamesValue(t *testing.T) {
	for _, c := range []Config{
		{RetainSnapshots: 0, OpenTimeout: time.Second},
		{RetainSnapshots: 1, LogCacheBytes: -1, OpenTimeout: time.Second},
		{RetainSnapshots: 1, OpenTimeout: 0},
	} {
		err := c.Validate()
		if err == nil {
			t.Fatalf("Validate(%+v) = nil, want an error", c)
		}
		if !strings.Contains(err.Error(), "(0)") && !strings.Contains(err.Error(), "(-1)") && !strings.Contains(err.Error(), "(0s)") {
			t.Fatalf("Validate(%+v) = %q, want the bad value named", c, err)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig invalid: %v", err)
	}
}

// raft truncates a follower's conflicting log suffix after a leader change.
// The raft-wal store this package used before then marked its tail segment
// sealed without an index (hashicorp/raft-wal#31), and after a restart
// raft.NewRaft panicked reading it, so the node never came back. The
// stores must survive it.
func TestDiskStoresSurviveTailTruncationAndRestart(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, 5, DefaultConfig(), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	store := func(from, to, term uint64) {
		t.Helper()
		var logs []*raft.Log
		for i := from; i <= to; i++ {
			logs = append(logs, &raft.Log{Index: i, Term: term, Type: raft.LogCommand, Data: []byte{byte(i), byte(term)}})
		}
		if err := s.Log.StoreLogs(logs); err != nil {
			t.Fatalf("StoreLogs(%d..%d): %v", from, to, err)
		}
	}
	store(1, 100, 1)
	if err := s.Log.DeleteRange(51, 100); err != nil {
		t.Fatalf("tail truncation: %v", err)
	}
	store(51, 60, 2)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = Open(dir, 5, DefaultConfig(), testLogger(t))
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	if last, _ := s.Log.LastIndex(); last != 60 {
		t.Fatalf("LastIndex after reopen = %d, want 60", last)
	}
	for _, c := range []struct{ index, term uint64 }{{1, 1}, {30, 1}, {50, 1}, {51, 2}, {60, 2}} {
		var got raft.Log
		if err := s.Log.GetLog(c.index, &got); err != nil {
			t.Fatalf("GetLog(%d) after reopen: %v", c.index, err)
		}
		if got.Term != c.term || got.Data[0] != byte(c.index) {
			t.Fatalf("GetLog(%d) = term %d data %v, want term %d", c.index, got.Term, got.Data, c.term)
		}
	}
}

func TestOpenRefusesOldRaftWALDataDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(ShardDir(dir, 2), "wal"), 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := Open(dir, 2, DefaultConfig(), testLogger(t))
	if err == nil || !strings.Contains(err.Error(), "raft-wal") || !strings.Contains(err.Error(), ShardDir(dir, 2)) {
		t.Fatalf("Open over a raft-wal dir: err = %v, want one naming raft-wal and the folder", err)
	}
}

func TestOpenTimesOutOnHeldLock(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, 4, DefaultConfig(), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cfg := DefaultConfig()
	cfg.OpenTimeout = 50 * time.Millisecond
	_, err = Open(dir, 4, cfg, testLogger(t))
	if err == nil || !strings.Contains(err.Error(), "shard 4") || !strings.Contains(err.Error(), "holds it open") {
		t.Fatalf("second Open: err = %v, want a timeout naming shard 4", err)
	}
}

// TestGetLogAllocatesTheEntryOnce: reading a large entry back from bbolt
// allocates about its size, not the codec's quadratic growth (a 3 MB
// entry cost 20 MB).
func TestGetLogAllocatesTheEntryOnce(t *testing.T) {
	cfg := DefaultConfig()
	cfg.LogCacheBytes = 0 // read from bbolt
	s, err := Open(t.TempDir(), 1, cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 3 << 20
	if err := s.Log.StoreLogs([]*raft.Log{{Index: 1, Term: 1, Type: raft.LogCommand, Data: bytes.Repeat([]byte{7}, n)}}); err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := s.Log.GetLog(1, &l); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if len(l.Data) != n || l.Data[n-1] != 7 {
		t.Fatalf("read back %d bytes", len(l.Data))
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 2*n {
		t.Fatalf("reading a %d-byte entry allocated %d bytes", n, got)
	}
}
