package trainer

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"dsspmesh/cudaops"
)

// squat creates path as another Unix user would (uid 65534, nobody),
// when this test runs as root; it reports whether it could.
func squat(t *testing.T, path string) bool {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return os.Chown(path, 65534, 65534) == nil
}

// TestShmNameNobodyCanTake: the name a node's earlier builds used (a hash
// of the socket's path) taken by another user does not stop NewShm, whose
// name has 128 random bits; a file of this user's earlier run of the same
// socket is removed, another user's is left alone.
func TestShmNameNobodyCanTake(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "trainer.sock")
	h := fnv.New64a()
	h.Write([]byte(sock))
	predictable := filepath.Join(dir, fmt.Sprintf("dssp-trainer-%016x.shm", h.Sum64()))
	mine := filepath.Join(dir, fmt.Sprintf("dssp-trainer-%016x-leftover.shm", h.Sum64()))
	theirs := filepath.Join(dir, fmt.Sprintf("dssp-trainer-%016x-theirs.shm", h.Sum64()))
	other := squat(t, predictable) && squat(t, theirs)
	if err := os.WriteFile(mine, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := NewShm(dir, sock, 5)
	if err != nil {
		t.Fatalf("NewShm beside a squatted name: %v", err)
	}
	defer a.Close()
	b, err := NewShm(dir, sock, 5)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if a.Path == b.Path || !strings.HasPrefix(filepath.Base(a.Path), "dssp-trainer-") || a.Path == predictable {
		t.Fatalf("two files %s and %s: want two random names", a.Path, b.Path)
	}
	if _, err := os.Stat(mine); !os.IsNotExist(err) {
		t.Fatalf("this user's leftover %s still there: %v", mine, err)
	}
	if _, err := os.Stat(theirs); other && err != nil {
		t.Fatalf("another user's file %s removed: %v", theirs, err)
	}
}

// TestShmSquatNamedWithItsOwner: a file where the shared memory must be
// made is refused with a *ShmError naming the file and its owner.
func TestShmSquatNamedWithItsOwner(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.shm")
	if !squat(t, path) {
		t.Skip("not root: cannot create a file as another user")
	}
	_, err := CreateShm(path, 5)
	var se *ShmError
	if !errors.As(err, &se) || se.Path != path || !strings.Contains(se.Owner, "65534") || !strings.Contains(err.Error(), "owned by") {
		t.Fatalf("CreateShm over another user's file: %v, want a *ShmError naming the file and uid 65534", err)
	}
}

// TestTrainerRefusedWithShmCode: a node that cannot make the
// shared-memory file refuses the trainer with code "shm" naming the file,
// not a job mismatch.
func TestTrainerRefusedWithShmCode(t *testing.T) {
	dir := t.TempDir()
	notADir := filepath.Join(dir, "file")
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := Listen(Config{Socket: filepath.Join(dir, "trainer.sock"), ShmDir: notADir, GoneGrace: -1}, Deps{Node: "node-a",
		Admit: func(l cudaops.Layout) (Admission, *Refusal) {
			return Admission{Layout: l, Batch: 8, Seed: 1, Dataset: "mnist"}, nil
		},
		Init:     func([]float32) error { return nil },
		Attached: func(*External) {},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done; srv.Close("test over") })
	_, rep := dial(t, srv.Path(), mlpLayout())
	if rep["op"] != "error" || rep["code"] != CodeShm || !strings.Contains(rep["message"].(string), notADir) {
		t.Fatalf("reply %v, want an error of code %q naming %s", rep, CodeShm, notADir)
	}
}
