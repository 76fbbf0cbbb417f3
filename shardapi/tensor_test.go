package shardapi

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/iotest"
)

func TestFP32RoundTrip(t *testing.T) {
	v := []float32{0, -0, 1, -2.5, math.MaxFloat32, math.SmallestNonzeroFloat32, 1e-40, 3.14159}
	b := FP32.Append([]byte{9}, v)
	if len(b) != 1+FP32.Bytes(len(v)) {
		t.Fatalf("appended %d bytes, want %d", len(b)-1, FP32.Bytes(len(v)))
	}
	n, err := FP32.values(len(b[1:]))
	if err != nil || n != len(v) {
		t.Fatalf("Len = %d, %v", n, err)
	}
	got := make([]float32, n)
	bad, err := FP32.Decode(got, b[1:])
	if err != nil || bad != -1 {
		t.Fatalf("Decode: non-finite %d, %v", bad, err)
	}
	for i := range v {
		if math.Float32bits(got[i]) != math.Float32bits(v[i]) {
			t.Errorf("value %d: %v came back as %v", i, v[i], got[i])
		}
	}
	if i, _, sq := FP32.Scan(b[1:]); i != -1 || sq == 0 {
		t.Errorf("Scan = %d, %g", i, sq)
	}
}

func TestFP32NonFinite(t *testing.T) {
	for _, x := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		b := FP32.Append(nil, []float32{1, 2, x, 4, x})
		got := make([]float32, 5)
		if bad, err := FP32.Decode(got, b); err != nil || bad != 2 {
			t.Errorf("%v: Decode says non-finite %d, %v; want 2", x, bad, err)
		}
		if got[4] == got[4] && !math.IsInf(float64(got[4]), 0) {
			t.Errorf("%v: decoded as %v", x, got[4])
		}
		if i, v, _ := FP32.Scan(b); i != 2 || math.Float32bits(v) != math.Float32bits(x) {
			t.Errorf("%v: Scan says %d (%v)", x, i, v)
		}
	}
}

func TestFP32BadLength(t *testing.T) {
	if _, err := FP32.values(7); !errors.Is(err, ErrBadTensor) {
		t.Errorf("Len(7 bytes) = %v", err)
	}
	if _, err := FP32.Decode(make([]float32, 2), make([]byte, 4)); !errors.Is(err, ErrBadTensor) {
		t.Errorf("Decode(2 values from 4 bytes) = %v", err)
	}
}

func TestBF16RoundsToNearestEven(t *testing.T) {
	for _, c := range []struct {
		in   uint32
		want uint16
	}{
		{0x3f800000, 0x3f80}, // 1
		{0x3f807fff, 0x3f80}, // just below half: down
		{0x3f808000, 0x3f80}, // tie, 0x3f80 even: down
		{0x3f808001, 0x3f81}, // just above half: up
		{0x3f818000, 0x3f82}, // tie, 0x3f81 odd: up
		{0xbf818000, 0xbf82}, // the same, negative
		{0x00000001, 0x0000}, // smallest subnormal: to zero
		{0x80000000, 0x8000}, // −0 stays −0
		{0x7f7fffff, 0x7f80}, // MaxFloat32: beyond bf16's range, +Inf
		{0x7f800000, 0x7f80}, // +Inf
		{0xff800000, 0xff80}, // −Inf
	} {
		if got := ToBF16(math.Float32frombits(c.in)); got != c.want {
			t.Errorf("ToBF16(%#08x) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
	// A NaN stays a NaN, whatever mantissa bits it has.
	for _, u := range []uint32{0x7fc00000, 0x7f800001, 0xff800001, 0x7fffffff} {
		if h := ToBF16(math.Float32frombits(u)); h&0x7f80 != 0x7f80 || h&0x7f == 0 || h>>15 != uint16(u>>31) {
			t.Errorf("ToBF16(NaN %#08x) = %#04x, not a NaN of the same sign", u, h)
		}
	}
}

func TestBF16RoundTrip(t *testing.T) {
	v := []float32{0, 1, -2.5, 3.14159, 1e-3, -7e20, 1e-38, 65504}
	b := BF16.Append(nil, v)
	if len(b) != 2*len(v) || BF16.Bytes(len(v)) != len(b) {
		t.Fatalf("%d bytes for %d values", len(b), len(v))
	}
	got := make([]float32, len(v))
	if bad, err := BF16.Decode(got, b); err != nil || bad != -1 {
		t.Fatalf("Decode: %d, %v", bad, err)
	}
	for i, x := range v {
		if d := math.Abs(float64(got[i]-x)) / math.Max(math.Abs(float64(x)), 1e-45); d > 1.0/256 {
			t.Errorf("%v came back as %v (relative error %g > 2^-8)", x, got[i], d)
		}
		// Encoding a decoded value is exact: a bf16 value survives again.
		if ToBF16(got[i]) != ToBF16(x) {
			t.Errorf("%v: re-encoding %v changed it", x, got[i])
		}
	}
	if n, err := BF16.values(len(b)); err != nil || n != len(v) {
		t.Errorf("Len = %d, %v", n, err)
	}
	if _, err := BF16.values(len(b[:3])); !errors.Is(err, ErrBadTensor) {
		t.Errorf("Len(3 bytes) = %v", err)
	}
}

func TestBF16NonFinite(t *testing.T) {
	for _, x := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), math.MaxFloat32} {
		b := BF16.Append(nil, []float32{1, x, 2})
		got := make([]float32, 3)
		if bad, err := BF16.Decode(got, b); err != nil || bad != 1 {
			t.Errorf("%v: Decode says non-finite %d, %v; want 1", x, bad, err)
		}
		if i, _, _ := BF16.Scan(b); i != 1 {
			t.Errorf("%v: Scan says %d, want 1", x, i)
		}
	}
	if i, _, sq := BF16.Scan(BF16.Append(nil, []float32{3, 4})); i != -1 || sq != 25 {
		t.Errorf("Scan(3, 4) = %d, %g; want -1, 25", i, sq)
	}
}

func TestParsePrecision(t *testing.T) {
	for _, p := range []Precision{FP32, BF16, INT8} {
		if q, err := ParsePrecision(p.String()); err != nil || q != p {
			t.Errorf("ParsePrecision(%q) = %v, %v", p, q, err)
		}
	}
	if _, err := ParsePrecision("fp16"); err == nil {
		t.Error("fp16 parsed")
	}
	if err := (Spec{Len: 1, Policy: "asp", Optimizer: DefaultOptimizer(), Precision: 7}).Validate(); err == nil {
		t.Error("a Spec with precision 7 validated")
	}
}

// TestDecodeFromIsDecode: decoding from a reader a chunk at a time gives
// Decode's values and first non-finite index, in every precision, across
// chunk boundaries; a short reader is an error.
func TestDecodeFromIsDecode(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for _, p := range []Precision{FP32, BF16, INT8} {
		for _, n := range []int{0, 1, 300, decodeChunk/4 + 7, 3*decodeChunk + 1} {
			v := make([]float32, n)
			for i := range v {
				v[i] = float32(rng.NormFloat64())
			}
			if n > 100 {
				v[n-50] = float32(math.Inf(1))
			}
			enc := p.Append(nil, v)
			want, got := make([]float32, n), make([]float32, n)
			wantNF, _ := p.Decode(want, enc)
			gotNF, err := p.DecodeFrom(got, iotest.OneByteReader(bytes.NewReader(enc)))
			if err != nil || gotNF != wantNF || !slices.EqualFunc(got, want, func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }) {
				t.Fatalf("%s n=%d: DecodeFrom (non-finite at %d, %v) differs from Decode (at %d)", p, n, gotNF, err, wantNF)
			}
			if n > 0 {
				if _, err := p.DecodeFrom(got, bytes.NewReader(enc[:len(enc)-1])); err == nil {
					t.Fatalf("%s n=%d: a short reader decoded", p, n)
				}
			}
		}
	}
}
