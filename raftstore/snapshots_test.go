package raftstore

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// TestOpenRemovesUnfinishedSnapshots: a snapshot whose writer was killed
// (its sink never closed) stays as "<id>.tmp"; the next Open removes it
// and keeps the complete one.
func TestOpenRemovesUnfinishedSnapshots(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, 1, DefaultConfig(), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	create := func(index uint64) raft.SnapshotSink {
		sink, err := s.Snapshots.Create(raft.SnapshotVersionMax, index, 1, raft.Configuration{}, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sink.Write([]byte("state")); err != nil {
			t.Fatal(err)
		}
		return sink
	}
	if err := create(10).Close(); err != nil {
		t.Fatal(err)
	}
	create(20) // the process is killed while it writes this one
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	snapDir := filepath.Join(ShardDir(dir, 1), "snapshots")
	if n := countTmp(t, snapDir); n != 1 {
		t.Fatalf("%d unfinished snapshots before reopening, want 1", n)
	}

	s, err = Open(dir, 1, DefaultConfig(), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n := countTmp(t, snapDir); n != 0 {
		t.Errorf("%d unfinished snapshots after reopening, want 0", n)
	}
	metas, err := s.Snapshots.List()
	if err != nil || len(metas) != 1 || metas[0].Index != 10 {
		t.Fatalf("snapshots %+v, %v; want the complete one at index 10", metas, err)
	}
}

func countTmp(t *testing.T, dir string) int {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".tmp") {
			n++
		}
	}
	return n
}
