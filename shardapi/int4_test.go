package shardapi

import (
	"errors"
	"math"
	"testing"
)

// TestINT4RoundTrip: every value decodes within half a step (its block's
// largest magnitude ÷ 7) of itself, sizes and lengths agree (even counts:
// int4Len cannot tell an odd last block), and Scan's sum of squares is
// the decoded values'.
func TestINT4RoundTrip(t *testing.T) {
	for _, n := range []int{1, 2, 3, 255, 256, 257, 600, 1024} {
		v := randomGradient(n, uint64(n))
		b := INT4.Append([]byte{9}, v)[1:]
		if len(b) != INT4.Bytes(n) || INT4.Bytes(n) != n/256*132+map[bool]int{true: 4 + (n%256+1)/2}[n%256 > 0] {
			t.Fatalf("n=%d: %d bytes, Bytes says %d", n, len(b), INT4.Bytes(n))
		}
		if m, err := INT4.values(len(b)); err != nil || m != n+n%2 {
			t.Fatalf("n=%d: values = %d, %v", n, m, err)
		}
		got := make([]float32, n)
		if bad, err := INT4.Decode(got, b); err != nil || bad != -1 {
			t.Fatalf("n=%d: Decode: non-finite %d, %v", n, bad, err)
		}
		var sq float64
		for i := range v {
			lo := i / int8Block * int8Block
			var amax float64
			for _, x := range v[lo:min(lo+int8Block, n)] {
				amax = max(amax, math.Abs(float64(x)))
			}
			if d := math.Abs(float64(got[i] - v[i])); d > amax/int4Max/2*1.001 {
				t.Fatalf("n=%d value %d: %v came back as %v (step %g)", n, i, v[i], got[i], amax/int4Max)
			}
			sq += float64(got[i]) * float64(got[i])
		}
		if i, _, s := INT4.Scan(b); i != -1 || math.Abs(s-sq) > 1e-6*sq {
			t.Errorf("n=%d: Scan = %d, %g; decoded sum of squares %g", n, i, s, sq)
		}
	}
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
