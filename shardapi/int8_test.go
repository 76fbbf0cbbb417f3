package shardapi

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// randomGradient is n values of mixed magnitudes, a few blocks of them
// far smaller than the rest, as a layer's gradient has.
func randomGradient(n int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 1))
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * math.Pow(10, float64(-(i/int8Block)%4)))
	}
	return v
}

// TestINT8RoundTrip: every value decodes within half a step of its
// block's scale, sizes and lengths agree, and Scan's sum of squares is the
// decoded values'.
func TestINT8RoundTrip(t *testing.T) {
	roundTrip(t, INT8, 127, func(n int) int { return n + 4*((n+255)/256) }, func(n int) int { return n })
}

// roundTrip is the round-trip test of p, whose steps are a block's
// largest magnitude ÷ levels: each of a few lengths n encodes in size(n)
// bytes, which values reads back as values(n).
func roundTrip(t *testing.T, p Precision, levels float64, size, values func(n int) int) {
	for _, n := range []int{1, 2, 3, 255, 256, 257, 600, 1024} {
		v := randomGradient(n, uint64(n))
		b := p.Append([]byte{9}, v)[1:]
		if len(b) != p.Bytes(n) || p.Bytes(n) != size(n) {
			t.Fatalf("%s n=%d: %d bytes, Bytes says %d, want %d", p, n, len(b), p.Bytes(n), size(n))
		}
		if m, err := p.values(len(b)); err != nil || m != values(n) {
			t.Fatalf("%s n=%d: values = %d, %v", p, n, m, err)
		}
		got := make([]float32, n)
		if bad, err := p.Decode(got, b); err != nil || bad != -1 {
			t.Fatalf("%s n=%d: Decode: non-finite %d, %v", p, n, bad, err)
		}
		var sq float64
		for i := range v {
			lo := i / int8Block * int8Block
			var amax float64
			for _, x := range v[lo:min(lo+int8Block, n)] {
				amax = max(amax, math.Abs(float64(x)))
			}
			if d := math.Abs(float64(got[i] - v[i])); d > amax/levels/2*1.001 {
				t.Fatalf("%s n=%d value %d: %v came back as %v (step %g)", p, n, i, v[i], got[i], amax/levels)
			}
			sq += float64(got[i]) * float64(got[i])
		}
		if i, _, s := p.Scan(b); i != -1 || math.Abs(s-sq) > 1e-6*sq {
			t.Errorf("%s n=%d: Scan = %d, %g; decoded sum of squares %g", p, n, i, s, sq)
		}
	}
}

// TestINT8NonFinite: a NaN or Inf makes its whole block non-finite,
// reported at the block's first index, and clears the block's residual,
// under int8 and int4.
func TestINT8NonFinite(t *testing.T) {
	for _, p := range []Precision{INT8, INT4} {
		t.Run(p.String(), func(t *testing.T) { nonFiniteBlock(t, p) })
	}
}

func nonFiniteBlock(t *testing.T, p Precision) {
	for _, x := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		v := randomGradient(600, 3)
		v[300] = x
		resid := INT8.Append(nil, slices.Repeat([]float32{0.001}, 600))
		b := p.AppendFeedback(nil, v, resid)
		got := make([]float32, 600)
		if bad, err := p.Decode(got, b); err != nil || bad != 256 {
			t.Errorf("%v: Decode says non-finite %d, %v; want 256", x, bad, err)
		}
		if i, s, _ := p.Scan(b); i != 256 || math.Float32bits(s) != math.Float32bits(x) {
			t.Errorf("%v: Scan says %d (%v)", x, i, s)
		}
		r := make([]float32, 600)
		INT8.Decode(r, resid)
		if slices.ContainsFunc(r[256:512], func(r float32) bool { return r != 0 }) || r[0] == 0.001 {
			t.Errorf("%v: residual of the bad block not cleared, or the good one not updated", x)
		}
	}
}

func TestINT8BadLength(t *testing.T) {
	for _, n := range []int{3, 4, 260 + 3, 260 + 4} {
		if _, err := INT8.values(n); !errors.Is(err, ErrBadTensor) {
			t.Errorf("Len(%d bytes) = %v", n, err)
		}
	}
	if _, err := INT8.Decode(make([]float32, 2), make([]byte, 4)); !errors.Is(err, ErrBadTensor) {
		t.Errorf("Decode(2 values from 4 bytes) = %v", err)
	}
}

// TestINT8FeedbackKeepsSmallValues: values below half a step of their
// block round to zero every time on their own; with feedback the decoded
// sum over many pushes tracks the true sum to within one step.
func TestINT8FeedbackKeepsSmallValues(t *testing.T) { feedbackTracksTheSum(t, INT8, 127, 0.001) }

// feedbackTracksTheSum is the feedback test of p, whose steps are a
// block's largest magnitude ÷ levels, with values of magnitude up to 3 ×
// small beside a 1 (below half a step).
func feedbackTracksTheSum(t *testing.T, p Precision, levels float64, small float32) {
	g := make([]float32, 300)
	g[0] = 1 // the block's scale: steps of 1/levels
	for i := 1; i < len(g); i++ {
		g[i] = small * float32(i%7-3)
	}
	const pushes = 200
	plain, fed := make([]float64, len(g)), make([]float64, len(g))
	resid := p.NewResidual(len(g))
	dec := make([]float32, len(g))
	for range pushes {
		p.Decode(dec, p.Append(nil, g))
		for i, x := range dec {
			plain[i] += float64(x)
		}
		p.Decode(dec, p.AppendFeedback(nil, g, resid))
		for i, x := range dec {
			fed[i] += float64(x)
		}
	}
	for i := 1; i < 256; i++ {
		want := pushes * float64(g[i])
		if plain[i] != 0 {
			t.Fatalf("%s value %d without feedback summed to %g; expected it to round away", p, i, plain[i])
		}
		if math.Abs(fed[i]-want) > 1/levels {
			t.Fatalf("%s value %d with feedback summed to %g, want %g ± one step", p, i, fed[i], want)
		}
	}
}

// TestINT8ResidualWithinItsBound: the residual, kept in int8's layout,
// holds what the encoding lost to within 1/508 of the block's step (it is
// at most half a step, rounded to 1/254 of its own largest value).
func TestINT8ResidualWithinItsBound(t *testing.T) {
	const n = 1000
	v := randomGradient(n, 5)
	resid := INT8.NewResidual(n)
	dec, r := make([]float32, n), make([]float32, n)
	INT8.Decode(dec, INT8.AppendFeedback(nil, v, resid))
	INT8.Decode(r, resid)
	for lo := 0; lo < n; lo += 256 {
		hi := min(lo+256, n)
		var amax float64
		for _, x := range v[lo:hi] {
			amax = max(amax, math.Abs(float64(x)))
		}
		step := amax / 127
		for i := lo; i < hi; i++ {
			lost := float64(v[i]) - float64(dec[i])
			if math.Abs(lost) > step/2*(1+1e-6) {
				t.Fatalf("value %d lost %g, more than half a step %g", i, lost, step/2)
			}
			if d := math.Abs(float64(r[i]) - lost); d > step/508*(1+1e-5) {
				t.Fatalf("residual %d is %g, lost %g: off by %g > step/508 = %g", i, r[i], lost, d, step/508)
			}
		}
	}
}

// Parameters and sums travel in bf16 when gradients travel in int8.
func TestINT8ParamsAndSumsInBF16(t *testing.T) {
	for p, want := range map[Precision]Precision{FP32: FP32, BF16: BF16, INT8: BF16} {
		if p.Params() != want || p.Sums() != want {
			t.Errorf("%s: Params %s, Sums %s, want %s", p, p.Params(), p.Sums(), want)
		}
	}
}

// BenchmarkCodec encodes (an Encoder given the slice whole, with feedback
// under int8) and decodes one shard's slice of the default MLP in each
// precision.
func BenchmarkCodec(b *testing.B) {
	const n = 235146 / 4
	g := randomGradient(n, 1)
	for _, p := range []Precision{FP32, BF16, INT8} {
		resid, e, dst := p.NewResidual(n), NewEncoder(p, n), make([]float32, n)
		b.Run("encode-"+p.String(), func(b *testing.B) {
			b.SetBytes(4 * n)
			for b.Loop() {
				e.Start(resid)
				e.Put(0, g)
			}
		})
		enc := p.Append(nil, g)
		b.Run("decode-"+p.String(), func(b *testing.B) {
			b.SetBytes(4 * n)
			for b.Loop() {
				p.Decode(dst, enc)
			}
		})
	}
}
