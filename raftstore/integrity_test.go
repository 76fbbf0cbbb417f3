package raftstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// populatedShard writes a shard's stores as a replica leaves them — small
// and large entries, a compacted prefix, a term and a vote, one snapshot —
// closes them and returns the data dir and the log database's path.
func populatedShard(t *testing.T, shard uint32) (dataDir, path string) {
	t.Helper()
	dataDir = t.TempDir()
	s, err := Open(dataDir, shard, DefaultConfig(), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	var logs []*raft.Log
	for i := uint64(1); i <= 400; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 4, Type: raft.LogCommand, Data: populatedEntry(i)})
	}
	if err := s.Log.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := s.Log.DeleteRange(1, 100); err != nil {
		t.Fatal(err)
	}
	if err := s.Stable.SetUint64([]byte("CurrentTerm"), 4); err != nil {
		t.Fatal(err)
	}
	sink, err := s.Snapshots.Create(raft.SnapshotVersionMax, 100, 4, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write([]byte("fsm state")); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dataDir, filepath.Join(ShardDir(dataDir, shard), "raft.db")
}

// populatedEntry is entry i of populatedShard: 1 KiB, and every tenth
// 64 KiB (a bucket of its own, see bigEntry).
func populatedEntry(i uint64) []byte {
	if i%10 == 0 {
		return entryData(i, 4, 64<<10)
	}
	return entryData(i, 4, 1<<10)
}

// wantDamaged checks that Open refuses the shard with a *DamagedError that
// names the file, the reason and the remedy (the shard folder to remove).
func wantDamaged(t *testing.T, dataDir string, shard uint32, path, reason string) {
	t.Helper()
	s, err := Open(dataDir, shard, DefaultConfig(), testLogger(t))
	if err == nil {
		s.Close()
		t.Fatalf("Open over a damaged %s succeeded", path)
	}
	var de *DamagedError
	if !errors.As(err, &de) {
		t.Fatalf("Open: err = %v (%T), want a *DamagedError", err, err)
	}
	msg := err.Error()
	for _, want := range []string{path, reason, "remove " + ShardDir(dataDir, shard), "catches up from its peers"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("Open: err = %q, want it to contain %q", msg, want)
		}
	}
	// The refusal changes nothing on disk: a second Open says the same.
	if _, err2 := Open(dataDir, shard, DefaultConfig(), testLogger(t)); err2 == nil || err2.Error() != msg {
		t.Fatalf("second Open: err = %v, want %q again", err2, msg)
	}
}

func TestOpenRefusesZeroLengthLog(t *testing.T) {
	dataDir, path := populatedShard(t, 1)
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	wantDamaged(t, dataDir, 1, path, "is empty")
}

func TestOpenRefusesZeroFilledLog(t *testing.T) {
	dataDir, path := populatedShard(t, 1)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, make([]byte, fi.Size()), 0o600); err != nil {
		t.Fatal(err)
	}
	wantDamaged(t, dataDir, 1, path, "no valid meta page")
}

// A halved raft.db kept its meta pages but lost the pages they point to:
// bbolt 1.3.6 maps past the end of the file and faults (SIGSEGV in
// checkBucket while it rebuilds the freelist) or, if the pages it reads
// happen to be there, opens a log with entries missing.
func TestOpenRefusesTruncatedLog(t *testing.T) {
	dataDir, path := populatedShard(t, 1)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	wantDamaged(t, dataDir, 1, path, "truncated")
}

func TestOpenRefusesGarbageLog(t *testing.T) {
	dataDir, path := populatedShard(t, 1)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	garbage := make([]byte, fi.Size())
	rand.NewChaCha8([32]byte{1}).Read(garbage)
	if err := os.WriteFile(path, garbage, 0o600); err != nil {
		t.Fatal(err)
	}
	wantDamaged(t, dataDir, 1, path, "no valid meta page")
}

// Garbage over every page but the two meta pages: bbolt opens the file
// (its meta pages are intact) and then reads the garbage as the tree.
func TestOpenRefusesGarbageBehindValidMetaPages(t *testing.T) {
	dataDir, path := populatedShard(t, 1)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ps := os.Getpagesize()
	rand.NewChaCha8([32]byte{3}).Read(b[2*ps:])
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	wantDamaged(t, dataDir, 1, path, "page")
}

// Each page that starts a page of the tree (not the body of a large
// entry), overwritten alone with garbage or zeros, is either refused or (a
// free page) harmless: Open never panics and never faults.
func TestOpenSurvivesEachPageDamaged(t *testing.T) {
	dataDir, path := populatedShard(t, 1)
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ps := os.Getpagesize()
	rng := rand.NewChaCha8([32]byte{5})
	refused, tried := 0, 0
	for p := 2; p < len(orig)/ps; p++ {
		if binary.NativeEndian.Uint64(orig[p*ps:]) != uint64(p) {
			continue // an overflow page: an entry's bytes
		}
		tried++
		b := bytes.Clone(orig)
		if p%2 == 0 {
			rng.Read(b[p*ps : (p+1)*ps])
		} else {
			clear(b[p*ps : (p+1)*ps])
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Open(dataDir, 1, DefaultConfig(), testLogger(t))
		if err == nil {
			// Accepted: the page was free, and every entry reads back.
			for i := uint64(101); i <= 400; i++ {
				var l raft.Log
				if err := s.Log.GetLog(i, &l); err != nil || !bytes.Equal(l.Data, populatedEntry(i)) {
					t.Fatalf("page %d damaged and accepted: GetLog(%d) = %v", p, i, err)
				}
			}
			s.Close()
			continue
		}
		var de *DamagedError
		if !errors.As(err, &de) {
			t.Fatalf("page %d damaged: err = %v, want a *DamagedError", p, err)
		}
		refused++
	}
	t.Logf("%d of %d pages damaged were refused, the rest were free", refused, tried)
	if refused == 0 {
		t.Fatal("no damaged page was refused")
	}
}

// A replica whose raft.db is gone but whose snapshots are there held the
// shard: starting it afresh would vote with term 0 and could roll the
// shard back to its snapshot.
func TestOpenRefusesMissingLogBesideSnapshots(t *testing.T) {
	dataDir, path := populatedShard(t, 1)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	wantDamaged(t, dataDir, 1, path, "snapshots")
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open recreated %s: %v", path, err)
	}
}

// The shard folder appears only with its log database in it (see
// createShardDir), so a folder without raft.db lost it.
func TestOpenRefusesMissingLogInShardFolder(t *testing.T) {
	dataDir := t.TempDir()
	if err := os.MkdirAll(ShardDir(dataDir, 2), 0o700); err != nil {
		t.Fatal(err)
	}
	wantDamaged(t, dataDir, 2, filepath.Join(ShardDir(dataDir, 2), "raft.db"), "missing")
}

// The remedy the error names works: with the shard folder removed, Open
// starts an empty replica.
func TestRemovingADamagedShardFolderStartsAfresh(t *testing.T) {
	dataDir, path := populatedShard(t, 1)
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(ShardDir(dataDir, 1)); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dataDir, 1, DefaultConfig(), testLogger(t))
	if err != nil {
		t.Fatalf("Open after removing the shard folder: %v", err)
	}
	defer s.Close()
	if last, _ := s.Log.LastIndex(); last != 0 {
		t.Fatalf("LastIndex = %d, want an empty log", last)
	}
}

// A crash while a shard folder is created leaves its staging folder, which
// the next Open replaces.
func TestOpenReplacesAStaleStagingFolder(t *testing.T) {
	dataDir := t.TempDir()
	staging := ShardDir(dataDir, 3) + stagingSuffix
	if err := os.MkdirAll(staging, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(staging, "raft.db"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dataDir, 3, DefaultConfig(), testLogger(t))
	if err != nil {
		t.Fatalf("Open beside a stale staging folder: %v", err)
	}
	defer s.Close()
	if _, err := os.Stat(staging); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("staging folder left behind: %v", err)
	}
	exerciseStores(t, s)
}

// BenchmarkCheckShardDir measures the check Open runs before bbolt opens a
// log (checkShardDir) and the whole Open, on logs of entries of one size
// filling about 32 MiB, the page cache warm.
func BenchmarkCheckShardDir(b *testing.B) {
	for _, entry := range []int{1 << 10, 64 << 10, 8 << 20} {
		dataDir := b.TempDir()
		cfg := DefaultConfig()
		cfg.LogCacheBytes = 0
		s, err := Open(dataDir, 1, cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			b.Fatal(err)
		}
		n := (32 << 20) / entry
		var logs []*raft.Log
		for i := 1; i <= n; i++ {
			logs = append(logs, &raft.Log{Index: uint64(i), Term: 1, Type: raft.LogCommand, Data: bytes.Repeat([]byte{byte(i)}, entry)})
			if len(logs) == 256 || i == n {
				if err := s.Log.StoreLogs(logs); err != nil {
					b.Fatal(err)
				}
				logs = logs[:0]
			}
		}
		s.Close()
		fi, _ := os.Stat(filepath.Join(ShardDir(dataDir, 1), "raft.db"))
		name := fmt.Sprintf("entries=%dKiB/file=%dMB", entry>>10, fi.Size()>>20)
		b.Run(name+"/check", func(b *testing.B) {
			for b.Loop() {
				if err := checkShardDir(1, ShardDir(dataDir, 1), time.Second); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/open", func(b *testing.B) {
			for b.Loop() {
				s, err := Open(dataDir, 1, cfg, slog.New(slog.DiscardHandler))
				if err != nil {
					b.Fatal(err)
				}
				s.Close()
			}
		})
	}
}

// CheckShards reports every damaged shard folder of a data dir by name
// (a node refuses its whole start on one), passes sound ones, and skips
// what is not a shard folder; a data dir without shards has nothing to
// check.
func TestCheckShardsNamesEveryDamagedShard(t *testing.T) {
	if err := CheckShards(t.TempDir(), time.Second); err != nil {
		t.Fatalf("data dir without shards: %v", err)
	}
	dataDir, path1 := populatedShard(t, 1)
	for _, id := range []uint32{0, 2, 12} {
		s, err := Open(dataDir, id, DefaultConfig(), testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	if err := os.MkdirAll(ShardDir(dataDir, 5)+stagingSuffix, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := CheckShards(dataDir, time.Second); err != nil {
		t.Fatalf("sound shards: %v", err)
	}
	fi, err := os.Stat(path1)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path1, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	path12 := filepath.Join(ShardDir(dataDir, 12), "raft.db")
	if err := os.Truncate(path12, 0); err != nil {
		t.Fatal(err)
	}
	err = CheckShards(dataDir, time.Second)
	var de *DamagedError
	if !errors.As(err, &de) {
		t.Fatalf("CheckShards = %v, want a *DamagedError", err)
	}
	for _, want := range []string{path1 + " is damaged: truncated", path12 + " is empty", "remove " + ShardDir(dataDir, 1), "remove " + ShardDir(dataDir, 12)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("CheckShards = %v, want it to say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), ShardDir(dataDir, 0)+"/") || strings.Contains(err.Error(), ShardDir(dataDir, 2)+"/") {
		t.Errorf("CheckShards named a sound shard: %v", err)
	}
}
