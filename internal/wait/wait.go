// Package wait is the one bounded polling wait of this module, for state
// that announces no event: a real socket's, raft's own, another process's.
// Where an event exists (a channel closed on change, an observer), wait on
// it instead; never poll as a substitute for a sleep.
//
// Until blocks the calling goroutine; cond runs on it, every Tick.
package wait

import (
	"context"
	"fmt"
	"time"
)

// Tick is how often Until re-checks its condition.
const Tick = 10 * time.Millisecond

// Until returns nil once cond holds (checked at once, then every Tick),
// ctx's error if ctx ends first, and an error naming what after limit.
func Until(ctx context.Context, limit time.Duration, what string, cond func() bool) error {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	tick := time.NewTicker(Tick)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-deadline.C:
			return fmt.Errorf("timed out after %v waiting for %s", limit, what)
		case <-tick.C:
		}
	}
	return nil
}

// T is what For needs of a *testing.T or *testing.B.
type T interface {
	Helper()
	Fatal(args ...any)
}

// For is Until for a test: it fails t when cond does not hold within
// limit.
func For(t T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := Until(context.Background(), limit, what, cond); err != nil {
		t.Fatal(err)
	}
}
