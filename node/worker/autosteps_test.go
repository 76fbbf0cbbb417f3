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
