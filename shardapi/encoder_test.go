package shardapi

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestEncoderMatchesAppend: a slice given to an Encoder in pieces, in any
// order, encodes byte for byte as AppendFeedback encodes it whole, and an
// int8 residual evolves the same over several slices.
func TestEncoderMatchesAppend(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, p := range []Precision{FP32, BF16, INT8, INT4} {
		for _, n := range []int{1, 255, 256, 257, 1000, 3 * int8Block} {
			e := NewEncoder(p, n)
			resid, want := p.NewResidual(n), p.NewResidual(n)
			for round := range 4 {
				v := make([]float32, n)
				for i := range v {
					v[i] = float32(rng.NormFloat64()) * float32(round+1)
				}
				wantBytes := p.AppendFeedback(nil, v, want)
				e.Start(resid)
				for _, pc := range pieces(rng, n) {
					e.Put(pc[0], v[pc[0]:pc[1]])
				}
				got, err := e.Finish()
				if err != nil {
					t.Fatalf("%s n=%d: %v", p, n, err)
				}
				if !bytes.Equal(got, wantBytes) || !bytes.Equal(resid, want) {
					t.Fatalf("%s n=%d round %d: encoding or residual differs from AppendFeedback's", p, n, round)
				}
			}
		}
	}
}

// pieces cuts [0, n) into random pieces in random order.
func pieces(rng *rand.Rand, n int) [][2]int {
	var out [][2]int
	for lo := 0; lo < n; {
		hi := min(n, lo+1+rng.IntN(300))
		out = append(out, [2]int{lo, hi})
		lo = hi
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// TestEncoderRefusesIncomplete: Finish fails when values are missing or
// a piece lies outside the slice.
func TestEncoderRefusesIncomplete(t *testing.T) {
	for _, p := range []Precision{FP32, INT8, INT4} {
		e := NewEncoder(p, 600)
		e.Start(p.NewResidual(600))
		e.Put(0, make([]float32, 300))
		if _, err := e.Finish(); err == nil {
			t.Fatalf("%s: Finish with 300 of 600 values succeeded", p)
		}
		e.Start(nil)
		e.Put(500, make([]float32, 200))
		if _, err := e.Finish(); err == nil {
			t.Fatalf("%s: Finish after a piece past the end succeeded", p)
		}
		e.Start(nil)
		e.Put(0, make([]float32, 600))
		if _, err := e.Finish(); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
	}
}

// TestEncoderZero: Zero decodes as n zeros in every precision.
func TestEncoderZero(t *testing.T) {
	for _, p := range []Precision{FP32, BF16, INT8, INT4} {
		e := NewEncoder(p, 700)
		e.Start(nil)
		v := make([]float32, 700)
		for i := range v {
			v[i] = 1
		}
		e.Put(0, v)
		dst := make([]float32, 700)
		if _, err := p.Decode(dst, e.Zero()); err != nil {
			t.Fatal(err)
		}
		for i, x := range dst {
			if x != 0 {
				t.Fatalf("%s: value %d of Zero decodes as %v", p, i, x)
			}
		}
	}
}
