package launch

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRunKeepsTheTempFolderOfAFailedRun: a run in a temporary folder whose
// node fails keeps the folder, says where its logs are, and the error
// names the log.
func TestRunKeepsTheTempFolderOfAFailedRun(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	bin := filepath.Join(tmp, "fake-dssp")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho 'fake node: no mesh today' >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Binary, cfg.Nodes, cfg.Workers = bin, 2, 0
	cfg.ReportDir = filepath.Join(tmp, "report")
	var out bytes.Buffer
	cfg.Out = &out
	res, err := Run(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err == nil {
		t.Fatal("a mesh whose nodes exit at once ran")
	}
	if res == nil || res.KeptDir == "" {
		t.Fatalf("the failed run's folder was not kept (result %+v); output:\n%s", res, &out)
	}
	log, rerr := os.ReadFile(filepath.Join(res.KeptDir, "node0.log"))
	if rerr != nil || !strings.Contains(string(log), "no mesh today") {
		t.Fatalf("node0.log in the kept folder: %q, %v", log, rerr)
	}
	for _, want := range []string{"removed at the end unless the run fails", "is kept", filepath.Join(res.KeptDir, "node*.log")} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, &out)
		}
	}
}

// TestWatcherInterrupted: a run whose context ends (Ctrl-C) is
// Interrupted and says so, with the accuracy it had.
func TestWatcherInterrupted(t *testing.T) {
	var out bytes.Buffer
	w := &watcher{cfg: Config{Out: &out, Poll: time.Hour, TargetAcc: 0.97}, mesh: &Mesh{}, start: time.Now(), view: newView(&out)}
	w.res.Final = &EvalPoint{Accuracy: 0.91}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := w.loop(ctx)
	if err != nil || !res.Interrupted || res.Reached {
		t.Fatalf("loop after cancel: %+v, %v", res, err)
	}
	if got := out.String(); !strings.HasPrefix(got, "interrupted after ") || !strings.Contains(got, "at 91.00% test accuracy") {
		t.Errorf("output %q", got)
	}
}

// A trainer whose loop gives step() no loss sends 0: the progress line
// says none rather than a loss of 0.000; a built-in worker's 0 is shown.
func TestLossText(t *testing.T) {
	for _, c := range []struct {
		loss     float64
		external bool
		want     string
	}{{0, true, "    —"}, {0.1234, true, "0.123"}, {0, false, "0.000"}, {2.3026, false, "2.303"}} {
		if got := lossText(c.loss, c.external); got != c.want {
			t.Errorf("lossText(%v, %v) = %q, want %q", c.loss, c.external, got, c.want)
		}
	}
}
