package worker

import (
	"strings"
	"testing"
	"time"
)

// TestAutoStepsFollowTheLink: the first round has 2 steps; then H is the
// power of two that keeps a push within a tenth of a round (H ≥ 9 × wire
// ÷ step), at most the bound, and it follows the link within a few
// rounds when the link slows down and speeds up again.
func TestAutoStepsFollowTheLink(t *testing.T) {
	a := autoSteps{max: 64}
	if h := a.steps(); h != 2 {
		t.Fatalf("before any round: %d steps, want 2", h)
	}
	round := func(wire time.Duration) int {
		h := a.steps()
		a.observe(h, time.Duration(h)*10*time.Millisecond, wire) // 10 ms a step
		return a.steps()
	}
	// A push of 5 ms: 9 × 5 ÷ 10 = 4.5 → 8.
	if h := round(5 * time.Millisecond); h != 8 {
		t.Fatalf("a 5 ms push at 10 ms a step: H %d, want 8 (%s)", h, a.reason)
	}
	if !strings.Contains(a.reason, "H 8 keeps a push within 10 % of a round") {
		t.Fatalf("reason: %q", a.reason)
	}
	// The link slows to 60 ms a push: 54 → 64, reached within a few rounds.
	var h int
	for range 8 {
		h = round(60 * time.Millisecond)
	}
	if h != 64 {
		t.Fatalf("a 60 ms push: H %d after 8 rounds, want 64", h)
	}
	// 200 ms: beyond the bound; the reason says the bound holds it.
	for range 8 {
		h = round(200 * time.Millisecond)
	}
	if h != 64 || !strings.Contains(a.reason, "the bound (--local-steps auto:64)") {
		t.Fatalf("a 200 ms push: H %d, reason %q", h, a.reason)
	}
	// Back to 1 ms: 0.9 → the floor of 2, within 20 rounds (from 200 ms).
	for range 20 {
		h = round(time.Millisecond)
	}
	if h != 2 {
		t.Fatalf("a 1 ms push: H %d after 20 rounds, want 2", h)
	}
	// A bound below 2 is the bound.
	b := autoSteps{max: 1}
	if b.steps() != 1 {
		t.Fatalf("bound 1: %d", b.steps())
	}
}

// TestAutoStepsAskUnderBalance: under --balance the worker asks shard 0
// for the global round at which its share holds the steps its link
// needs (a share of a quarter of the global round needs 4× its steps'
// samples), capped at the bound, and nothing before a measurement.
func TestAutoStepsAskUnderBalance(t *testing.T) {
	a := autoSteps{max: 64}
	if got := a.want(32, 64, 256); got != 0 {
		t.Fatalf("before a measurement: asks %d, want 0", got)
	}
	a.observe(2, 20*time.Millisecond, 5*time.Millisecond) // 9 × 5 ÷ 10 = 4.5 steps
	if got := a.want(32, 64, 256); got != 576 {           // 4.5 × 32 × 4
		t.Fatalf("4.5 steps of 32 on a quarter share: asks %d, want 576", got)
	}
	a.observe(2, 20*time.Millisecond, time.Second)
	if got := a.want(32, 64, 256); got != 64*32*4 {
		t.Fatalf("beyond the bound: asks %d, want %d", got, 64*32*4)
	}
	if r := a.balancedReason(16, 64, 256); !strings.Contains(r, "shard 0 sizes the rounds (global 256 samples), this round's share 64 samples in 16 steps") {
		t.Fatalf("reason: %q", r)
	}
}
