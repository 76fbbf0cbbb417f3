package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestSelfCommand: dssp up's closing hint names a command that runs: the
// bare name when PATH finds this very file, `go run` for a binary that
// go run built in a temporary folder, else the binary's path.
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
}

// TestProgressLineWholeLinesWhenPiped: `dssp train`'s step progress is
// redrawn with \r only on a terminal; piped, every update is a line.
func TestProgressLineWholeLinesWhenPiped(t *testing.T) {
	var piped bytes.Buffer
	p := newProgressLine(&piped)
	p.show("epoch 1/2  step 100/938", false)
	p.show("epoch 1/2  step 938/938", true)
	if got, want := piped.String(), "epoch 1/2  step 100/938\nepoch 1/2  step 938/938\n"; got != want {
		t.Errorf("piped progress %q, want %q", got, want)
	}
	var term bytes.Buffer
	p = &progressLine{w: &term, tty: true}
	p.show("a", false)
	p.show("b", true)
	if got, want := term.String(), "\ra\rb\n"; got != want {
		t.Errorf("terminal progress %q, want %q", got, want)
	}
}
