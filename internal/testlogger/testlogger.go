// Package testlogger gives tests a *slog.Logger that writes through t.Log, so
// a test's log appears with it and only when it fails or runs with -v. It
// is for tests only (no package's build may import it).
//
// The logger stops writing once the test's cleanups have run: raft and
// its network transport log from goroutines their Shutdown does not wait
// for, and testing panics on a Log after the test has ended. Safe for
// concurrent use.
package testlogger

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// New returns a logger at level that writes through t.
func New(t testing.TB, level slog.Level) *slog.Logger {
	w := &writer{t: t}
	t.Cleanup(func() { w.mu.Lock(); w.done = true; w.mu.Unlock() })
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

type writer struct {
	t    testing.TB
	mu   sync.Mutex
	done bool
}

func (w *writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}
