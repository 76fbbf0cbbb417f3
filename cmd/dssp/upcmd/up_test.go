package upcmd

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSelfCommand: dssp up's closing hint names a command that runs: the
// bare name when PATH finds this very file, `go run` for a binary that
// go run built in a temporary folder, else the binary's path; from the
// lab's binary, the dssp beside it, else the bare name.
func TestSelfCommand(t *testing.T) {
	bin := t.TempDir()
	exe := filepath.Join(bin, "dssp")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	if got := selfCommand(exe); got != "dssp" {
		t.Errorf("installed on PATH: %q, want dssp", got)
	}
	other := filepath.Join(t.TempDir(), "dssp")
	if err := os.WriteFile(other, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := selfCommand(other); got != other {
		t.Errorf("another dssp on PATH: %q, want the path %s", got, other)
	}
	t.Setenv("PATH", "")
	if got := selfCommand("/tmp/go-build123/b001/exe/dssp"); got != "go run ./cmd/dssp" {
		t.Errorf("built by go run: %q", got)
	}
	if got := selfCommand(filepath.Join(bin, "dssp-lab")); got != exe {
		t.Errorf("the lab's binary beside a dssp: %q, want %s", got, exe)
	}
	if got := selfCommand(filepath.Join(t.TempDir(), "dssp-lab")); got != "dssp" {
		t.Errorf("the lab's binary alone: %q, want dssp", got)
	}
}
