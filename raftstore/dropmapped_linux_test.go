package raftstore

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/hashicorp/raft"
)

func rssFile(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "RssFile:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	t.Skip("no RssFile in /proc/self/status")
	return 0
}

// TestReadsLeaveNoMappedPages: reading 48 MiB of entries back from the
// bbolt file leaves its pages out of this process's resident memory (they
// would otherwise stay mapped and count in the node's RSS).
func TestReadsLeaveNoMappedPages(t *testing.T) {
	b, err := openBoltLog(filepath.Join(t.TempDir(), "raft.db"), boltOptions(DefaultConfig()))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const n, size = 12, 4 << 20
	for i := uint64(1); i <= n; i++ {
		if err := b.StoreLogs([]*raft.Log{entry(i, size)}); err != nil {
			t.Fatal(err)
		}
	}
	before := rssFile(t)
	var l raft.Log
	for i := uint64(1); i <= n; i++ {
		if err := b.GetLog(i, &l); err != nil {
			t.Fatal(err)
		}
	}
	grew := rssFile(t) - before
	t.Logf("file-backed resident memory grew %d KiB reading %d MiB of entries", grew>>10, n*size>>20)
	if grew > n*size/4 {
		t.Fatalf("reading %d MiB left %d MiB of the file mapped", n*size>>20, grew>>20)
	}
}

func wchar(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Skip(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "wchar:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	t.Skip("no wchar in /proc/self/io")
	return 0
}

// TestAppendsWriteEachEntryOnce: appending large entries (with the prefix
// deletes raft makes after snapshots) writes about their bytes, not the
// several times over that plain bbolt values sharing a leaf cost.
func TestAppendsWriteEachEntryOnce(t *testing.T) {
	b, err := openBoltLog(filepath.Join(t.TempDir(), "raft.db"), boltOptions(DefaultConfig()))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for i := uint64(1); i <= 4; i++ {
		b.StoreLogs([]*raft.Log{entry(i, 1<<20)})
	}
	w0 := wchar(t)
	const n = 20
	for i := uint64(5); i < 5+n; i++ {
		if err := b.StoreLogs([]*raft.Log{entry(i, 1<<20)}); err != nil {
			t.Fatal(err)
		}
		if i%4 == 0 {
			if err := b.DeleteRange(i-7, i-4); err != nil {
				t.Fatal(err)
			}
		}
	}
	w := wchar(t) - w0
	t.Logf("%d entries of 1 MiB: %.1f MiB written", n, float64(w)/(1<<20))
	if w > 2*n<<20 {
		t.Fatalf("%d MiB of entries wrote %.1f MiB", n, float64(w)/(1<<20))
	}
}

// TestSmallAppendsUnmapOncePerBudget: appending and reading back small
// entries unmaps the file once per unmapEvery bytes, not on every call
// (each unmapping walks the mapping and the next transaction faults bbolt's
// pages back in), and a large read still leaves nothing mapped beyond it.
func TestSmallAppendsUnmapOncePerBudget(t *testing.T) {
	b, err := openBoltLog(filepath.Join(t.TempDir(), "raft.db"), boltOptions(DefaultConfig()))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const n, size = 200, 64 << 10
	var l raft.Log
	for i := uint64(1); i <= n; i++ {
		if err := b.StoreLogs([]*raft.Log{entry(i, size)}); err != nil {
			t.Fatal(err)
		}
		if err := b.GetLog(i, &l); err != nil {
			t.Fatal(err)
		}
	}
	touched := int64(2 * n * size)
	if got, most := b.unmaps.Load(), touched/unmapEvery+1; got > most || got < most-2 {
		t.Fatalf("%d unmappings for %d MiB read and appended, want about %d (one per %d MiB)", got, touched>>20, most, unmapEvery>>20)
	}
}

// TestLargeEntriesLeaveLittleMapped: appending, reading back and deleting
// entries of a 100 MB model's size (3 MB pushes) leaves little of the file
// mapped. A touched page maps its whole folio, up to 2 MiB of ext4's page
// cache: deleting an entry's bucket reads its first page, so a compaction
// that unmapped nothing afterwards left 2 MiB per entry deleted mapped (six
// replicas of that model held 60 MB of their logs resident on a node).
func TestLargeEntriesLeaveLittleMapped(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raft.db")
	b, err := openBoltLog(path, boltOptions(DefaultConfig()))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const size = 3 << 20
	for i := uint64(1); i <= 9; i++ {
		if err := b.StoreLogs([]*raft.Log{entry(i, size)}); err != nil {
			t.Fatal(err)
		}
	}
	// Out of the page cache, so that reads bring the file back in the
	// large folios of readahead, as on a node whose cache turned over.
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Syscall6(syscall.SYS_FADVISE64, f.Fd(), 0, 0, 4 /* POSIX_FADV_DONTNEED */, 0, 0)
	f.Close()
	before := rssFile(t)
	var l raft.Log
	for i := uint64(1); i <= 8; i++ {
		if err := b.GetLog(i, &l); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.DeleteRange(1, 8); err != nil { // a compaction
		t.Fatal(err)
	}
	grew := rssFile(t) - before
	t.Logf("file-backed resident memory grew %d KiB reading and deleting 8 entries of 3 MiB", grew>>10)
	if grew > 2<<20 {
		t.Fatalf("%d KiB of the file left mapped after reading and deleting the entries", grew>>10)
	}
}
