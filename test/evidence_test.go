package test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLogWindowKeepsWhatFollowsTheOffsetWithinTheCap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.log")
	if err := os.WriteFile(path, []byte("before\nduring 1\nduring 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := logWindow(path, int64(len("before\n")), 1<<10)
	if err != nil || string(got) != "during 1\nduring 2\n" {
		t.Fatalf("window from the offset: %q, %v", got, err)
	}
	// A file replaced by a shorter one is read from its start.
	if got, err = logWindow(path, 1<<20, 1<<10); err != nil || !strings.HasPrefix(string(got), "before") {
		t.Fatalf("offset past the end: %q, %v", got, err)
	}
	// Over the cap: the head and the tail, the middle left out.
	got, err = logWindow(path, 0, 10)
	if err != nil || !strings.HasPrefix(string(got), "befor") || !strings.HasSuffix(string(got), "g 2\n") || !strings.Contains(string(got), "bytes left out") {
		t.Fatalf("capped window: %q, %v", got, err)
	}
}
