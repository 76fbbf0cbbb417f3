package shardapi

import (
	"errors"
	"math"
	"slices"
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

// TestINT4NonFinite: a NaN or Inf makes its whole block non-finite,
// reported at the block's first index, and clears the block's residual.
func TestINT4NonFinite(t *testing.T) {
	for _, x := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		v := randomGradient(600, 3)
		v[300] = x
		resid := INT8.Append(nil, slices.Repeat([]float32{0.001}, 600))
		b := INT4.AppendFeedback(nil, v, resid)
		got := make([]float32, 600)
		if bad, err := INT4.Decode(got, b); err != nil || bad != 256 {
			t.Errorf("%v: Decode says non-finite %d, %v; want 256", x, bad, err)
		}
		if i, s, _ := INT4.Scan(b); i != 256 || math.Float32bits(s) != math.Float32bits(x) {
			t.Errorf("%v: Scan says %d (%v)", x, i, s)
		}
		r := make([]float32, 600)
		INT8.Decode(r, resid)
		if slices.ContainsFunc(r[256:512], func(r float32) bool { return r != 0 }) || r[0] == 0.001 {
			t.Errorf("%v: residual of the bad block not cleared, or the good one not updated", x)
		}
	}
	if _, err := INT4.values(132 + 3); !errors.Is(err, ErrBadTensor) {
		t.Errorf("values(a torn scale) = %v", err)
	}
}

// TestINT4FeedbackTracksTheSum: values below half an int4 step of their
// block round to zero every time on their own; with feedback the decoded
// sum over many pushes tracks the true sum to within one step.
func TestINT4FeedbackTracksTheSum(t *testing.T) {
	g := make([]float32, 300)
	g[0] = 1 // the block's scale: steps of 1/7
	for i := 1; i < len(g); i++ {
		g[i] = 0.01 * float32(i%7-3)
	}
	const pushes = 200
	plain, fed := make([]float64, len(g)), make([]float64, len(g))
	resid := INT4.NewResidual(len(g))
	dec := make([]float32, len(g))
	for range pushes {
		INT4.Decode(dec, INT4.Append(nil, g))
		for i, x := range dec {
			plain[i] += float64(x)
		}
		INT4.Decode(dec, INT4.AppendFeedback(nil, g, resid))
		for i, x := range dec {
			fed[i] += float64(x)
		}
	}
	for i := 1; i < 256; i++ {
		want := pushes * float64(g[i])
		if plain[i] != 0 {
			t.Fatalf("value %d without feedback summed to %g; expected it to round away", i, plain[i])
		}
		if math.Abs(fed[i]-want) > 1.0/int4Max {
			t.Fatalf("value %d with feedback summed to %g, want %g ± one step", i, fed[i], want)
		}
	}
}
