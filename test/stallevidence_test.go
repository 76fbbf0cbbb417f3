package test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestDistinctWarnings: repeated warnings that differ in time and numbers
// fold into one line with their count, infos are left out, newest last.
func TestDistinctWarnings(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.log")
	log := `time=1 level=WARN msg="refusing raft stream" shard=2 peer=a
time=2 level=INFO msg="adding replica" shard=2
time=3 level=ERROR msg="failed to appendEntries" shard=2 index=17
time=4 level=WARN msg="refusing raft stream" shard=2 peer=a
time=5 level=ERROR msg="failed to appendEntries" shard=2 index=18
time=6 level=WARN msg="refusing raft stream" shard=2 peer=a
time=7 level=WARN msg="refusing raft stream" shard=3 peer=a
`
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	got := distinctWarnings(path, 12)
	want := []string{
		`2× time=5 level=ERROR msg="failed to appendEntries" shard=2 index=18`,
		`3× time=6 level=WARN msg="refusing raft stream" shard=2 peer=a`,
		`1× time=7 level=WARN msg="refusing raft stream" shard=3 peer=a`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if got := distinctWarnings(path, 1); len(got) != 1 || got[0] != want[2] {
		t.Fatalf("last 1: %q, want %q", got, want[2:])
	}
}
