package shardapi

import (
	"errors"
	"math"
	"testing"
)

func TestFP32RoundTrip(t *testing.T) {
	v := []float32{0, -0, 1, -2.5, math.MaxFloat32, math.SmallestNonzeroFloat32, 1e-40, 3.14159}
	b := FP32.Append([]byte{9}, v)
	if len(b) != 1+FP32.Bytes(len(v)) {
		t.Fatalf("appended %d bytes, want %d", len(b)-1, FP32.Bytes(len(v)))
	}
	n, err := FP32.Len(b[1:])
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
	if _, err := FP32.Len(make([]byte, 7)); !errors.Is(err, ErrBadTensor) {
		t.Errorf("Len(7 bytes) = %v", err)
	}
	if _, err := FP32.Decode(make([]float32, 2), make([]byte, 4)); !errors.Is(err, ErrBadTensor) {
		t.Errorf("Decode(2 values from 4 bytes) = %v", err)
	}
}
