package launch

import (
	"bufio"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestTrainerStartsWithItsNodeAndDiesWithIt: `dssp up --trainer` starts
// one trainer beside a training node with the socket in its environment,
// and kills it when the node exits.
func TestTrainerStartsWithItsNodeAndDiesWithIt(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "fake-dssp")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexec sleep 60\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "said")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := NewMesh(bin, dir, 1, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	m.AddArgs(0, "--data", "/some/mnist")
	m.Trainer = `echo "$DSSP_TRAINER_SOCKET $DSSP_NODE_INDEX $DSSP_DATA $$" > ` + fifo + `; exec sleep 60`
	if err := m.Start(0); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(fifo) // blocks until the trainer writes
	if err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(f).ReadString('\n')
	f.Close()
	fields := strings.Fields(line)
	if len(fields) != 4 || fields[0] != filepath.Join(dir, "node0", "trainer.sock") || fields[1] != "0" || fields[2] != "/some/mnist" {
		t.Fatalf("trainer's environment: %q", line)
	}
	tr := m.Procs[0].trainer
	if err := m.Kill(0); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(tr.Process.Pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("the trainer outlived its node: kill -0 %d: %v", tr.Process.Pid, err)
	}
}
