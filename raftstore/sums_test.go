package raftstore

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"go.etcd.io/bbolt"
)

// flipEntryByte flips one byte inside the stored value of entry idx of the
// closed log database path, as a bit flipped on disk inside a data page
// would: bbolt's structure stays valid, only the entry's bytes change.
func flipEntryByte(t *testing.T, path string, idx uint64, at int) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bbolt.Tx) error {
		logs := tx.Bucket(bucketLogs)
		k := key(idx)
		if v := logs.Get(k); v != nil {
			v = bytes.Clone(v)
			v[at%len(v)] ^= 0x40
			return logs.Put(k, v)
		}
		sub := logs.Bucket(k)
		v := bytes.Clone(sub.Get(entryKey))
		v[at%len(v)] ^= 0x40
		return sub.Put(entryKey, v)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestDamagedEntryIsReportedNotServed flips one byte in the data of a
// small and of a large entry on disk: reading each gives a no-op entry of
// its index (no damaged byte reaches raft) and tells the damage hook;
// the entries around them read as written.
func TestDamagedEntryIsReportedNotServed(t *testing.T) {
	dataDir, path := populatedShard(t, 3)
	flipEntryByte(t, path, 150, 700) // 1 KiB: inside its data
	flipEntryByte(t, path, 200, 40000)
	s, err := Open(dataDir, 3, DefaultConfig(), testLogger(t))
	if err != nil {
		t.Fatalf("Open with damaged entry bodies (the structure is whole): %v", err)
	}
	defer s.Close()
	var told []uint64
	s.SetDamaged(func(i uint64, err error) {
		if !strings.Contains(err.Error(), "checksum") {
			t.Errorf("damage of %d: %v, want a checksum error", i, err)
		}
		told = append(told, i)
	})
	for _, i := range []uint64{149, 150, 151, 200} {
		var l raft.Log
		if err := s.Log.GetLog(i, &l); err != nil {
			t.Fatalf("GetLog(%d): %v", i, err)
		}
		damaged := i == 150 || i == 200
		switch {
		case damaged && (l.Type != raft.LogNoop || l.Index != i || len(l.Data) != 0):
			t.Fatalf("damaged entry %d read as %v of index %d with %d bytes, want a no-op of its index", i, l.Type, l.Index, len(l.Data))
		case !damaged && !bytes.Equal(l.Data, populatedEntry(i)):
			t.Fatalf("entry %d reads back changed", i)
		}
	}
	if len(told) != 2 || told[0] != 150 || told[1] != 200 {
		t.Fatalf("damage hook told of %v, want [150 200]", told)
	}
}

// TestEntriesWithoutSumRead: a value without the checksum trailer (written
// before it existed, or by raft-boltdb) reads as it is, unchecked.
func TestEntriesWithoutSumRead(t *testing.T) {
	v, err := encodeLog(&raft.Log{Index: 7, Term: 2, Type: raft.LogCommand, Data: []byte("old")})
	if err != nil {
		t.Fatal(err)
	}
	body, err := checkEntry(v[:len(v)-entrySumLen])
	if err != nil || !bytes.Equal(body, v[:len(v)-entrySumLen]) {
		t.Fatalf("an entry without its trailer: %v", err)
	}
	if _, err := checkEntry(v); err != nil {
		t.Fatalf("a whole entry: %v", err)
	}
}

// snapshotDir is the folder of the one snapshot populatedShard wrote.
func snapshotDir(t *testing.T, dataDir string, shard uint32) string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(ShardDir(dataDir, shard), "snapshots", "*", "meta.json"))
	if err != nil || len(dirs) != 1 {
		t.Fatalf("snapshots: %v %v", dirs, err)
	}
	return filepath.Dir(dirs[0])
}

// TestOpenRefusesTamperedSnapshotMeta changes one digit of the snapshot's
// meta.json (its Index, 100 → 110: what made a replica skip entries for
// good): Open refuses the shard naming meta.json and the remedy. Its
// meta.json restored, it opens.
func TestOpenRefusesTamperedSnapshotMeta(t *testing.T) {
	dataDir, _ := populatedShard(t, 4)
	sd := snapshotDir(t, dataDir, 4)
	meta := filepath.Join(sd, "meta.json")
	orig, err := os.ReadFile(meta)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(orig, []byte(`"Index":100`)) {
		t.Fatalf("meta.json: %s", orig)
	}
	if err := os.WriteFile(meta, bytes.Replace(orig, []byte(`"Index":100`), []byte(`"Index":110`), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	wantDamaged(t, dataDir, 4, meta, "does not match the sum written with it")
	if err := os.WriteFile(meta, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dataDir, 4, DefaultConfig(), testLogger(t))
	if err != nil {
		t.Fatalf("Open with meta.json restored: %v", err)
	}
	if _, _, err := s.Snapshots.Open(filepath.Base(sd)); err != nil {
		t.Fatalf("open the snapshot: %v", err)
	}
	s.Close()
}

// TestOpenRefusesDamagedSnapshotState flips a byte of state.bin: Open
// refuses the shard naming state.bin, its checksum and the remedy (raft
// would fall back to an older snapshot the log no longer extends).
func TestOpenRefusesDamagedSnapshotState(t *testing.T) {
	dataDir, _ := populatedShard(t, 5)
	state := filepath.Join(snapshotDir(t, dataDir, 5), "state.bin")
	b, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	b[2] ^= 1
	if err := os.WriteFile(state, b, 0o600); err != nil {
		t.Fatal(err)
	}
	wantDamaged(t, dataDir, 5, state, "fails its checksum")
}

// TestSnapshotWithoutSumOpens: a snapshot of an earlier build (no
// meta.sum) is not checked against one, and a meta.sum of this build
// covers what meta.json says, Peers aside.
func TestSnapshotWithoutSumOpens(t *testing.T) {
	dataDir, _ := populatedShard(t, 6)
	sd := snapshotDir(t, dataDir, 6)
	var m fileMeta
	b, _ := os.ReadFile(filepath.Join(sd, "meta.json"))
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	sum, _ := os.ReadFile(filepath.Join(sd, metaSumFile))
	if got := metaSum(m.SnapshotMeta); got != strings.TrimSpace(string(sum)) {
		t.Fatalf("meta.sum %q, meta.json sums to %q", sum, got)
	}
	if err := os.Remove(filepath.Join(sd, metaSumFile)); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dataDir, 6, DefaultConfig(), testLogger(t))
	if err != nil {
		t.Fatalf("Open of a snapshot without meta.sum: %v", err)
	}
	s.Close()
}

// TestSnapshotReapedMidwayIsSkipped: raft's store reaps an older snapshot
// by removing its folder's files one by one, so a kill -9 meanwhile
// leaves a folder without meta.json. Raft's store skips it; Open does too
// (it refused the node's start, naming that folder, in the hostile
// suite). A folder without meta.json whose name says it is newer than
// every readable snapshot is the one raft would restore: refused.
func TestSnapshotReapedMidwayIsSkipped(t *testing.T) {
	dataDir, _ := populatedShard(t, 7)
	sd := snapshotDir(t, dataDir, 7)
	snaps := filepath.Dir(sd)
	var term, index uint64
	if _, err := fmt.Sscanf(filepath.Base(sd), "%d-%d-", &term, &index); err != nil {
		t.Fatalf("snapshot folder %s: %v", sd, err)
	}
	older := filepath.Join(snaps, fmt.Sprintf("%d-%d-1", term, index-50))
	if err := os.MkdirAll(older, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(older, "state.bin"), []byte("half reaped"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dataDir, 7, DefaultConfig(), testLogger(t))
	if err != nil {
		t.Fatalf("Open beside an older snapshot reaped midway: %v", err)
	}
	if _, _, err := s.Snapshots.Open(filepath.Base(sd)); err != nil {
		t.Fatalf("open the newest snapshot: %v", err)
	}
	s.Close()
	newer := filepath.Join(snaps, fmt.Sprintf("%d-%d-1", term+1, index+50))
	if err := os.MkdirAll(newer, 0o700); err != nil {
		t.Fatal(err)
	}
	wantDamaged(t, dataDir, 7, filepath.Join(newer, "meta.json"), "is unreadable")
}
