package shardapi

import (
	"errors"
	"testing"
)

// TestINT4RoundTrip: every value decodes within half a step (its block's
// largest magnitude ÷ 7) of itself, sizes and lengths agree (even counts:
// int4Len cannot tell an odd last block), and Scan's sum of squares is
// the decoded values'.
func TestINT4RoundTrip(t *testing.T) {
	size := func(n int) int {
		b := n / 256 * 132
		if n%256 > 0 {
			b += 4 + (n%256+1)/2
		}
		return b
	}
	roundTrip(t, INT4, int4Max, size, func(n int) int { return n + n%2 })
}

// TestINT4BadLength: a torn scale is no int4 encoding.
func TestINT4BadLength(t *testing.T) {
	if _, err := INT4.values(132 + 3); !errors.Is(err, ErrBadTensor) {
		t.Errorf("values(a torn scale) = %v", err)
	}
}

// TestINT4FeedbackTracksTheSum: values below half an int4 step of their
// block round to zero every time on their own; with feedback the decoded
// sum over many pushes tracks the true sum to within one step.
func TestINT4FeedbackTracksTheSum(t *testing.T) { feedbackTracksTheSum(t, INT4, int4Max, 0.01) }
