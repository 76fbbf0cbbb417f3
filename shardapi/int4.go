package shardapi

import (
	"encoding/binary"
	"math"
)

// The int4 layout: the int8 layout's blocks of int8Block values (the last
// may be shorter), each its fp32 scale (4 bytes, little-endian) followed by
// two values a byte — value 2k in the low nibble of the block's byte k,
// value 2k+1 in its high nibble (0 past the block's end) — each a signed
// 4-bit q ∈ [−7, 7] decoding as float32(q) × scale, exactly. A block's
// scale is its largest magnitude ÷ 7. A block holding a NaN or an Inf gets
// that value as its scale and zero nibbles, as under int8, so a
// non-finite gradient is still refused after encoding.
//
// int4 is for pushes with error feedback, like int8, and its residual is
// kept in int8's layout (int8Bytes of the slice): an int4 step loses up to
// half of 1/7 of a block's largest value a push, 18× int8's, so the
// feedback is what keeps a run of pushes unbiased; the residual's own
// rounding loses at most 1/254 of that. A block is 132 bytes for 256
// values: 0.52 bytes a value, 7.8× fewer than fp32, 1.9× fewer than int8.
// Local rounds push a round's pseudo-gradient once per H steps, so at
// H = 16 a sample costs 1/120 of per-step fp32's bytes on the wire.

// int4Max is the largest magnitude of a value's q.
const int4Max = 7

// int4BlockBytes is the encoded size of a block of n values.
func int4BlockBytes(n int) int { return 4 + (n+1)/2 }

// int4Bytes is the encoded size of n values.
func int4Bytes(n int) int {
	full, rem := n/int8Block, n%int8Block
	b := full * int4BlockBytes(int8Block)
	if rem > 0 {
		b += int4BlockBytes(rem)
	}
	return b
}

// int4Len is the number of values n bytes encode, or false when n is no
// valid size. A last block's odd value count is not told from the even
// count above it: the even one is returned (a receiver of int4 knows the
// slice's length; only a read of parameters, never in int4, asks).
func int4Len(n int) (int, bool) {
	blk := int4BlockBytes(int8Block)
	full, rem := n/blk, n%blk
	if rem == 0 {
		return full * int8Block, true
	}
	if rem <= 4 {
		return 0, false
	}
	return full*int8Block + 2*(rem-4), true
}

// int4Encode encodes v into out (int4Bytes(len(v)) long) block by block.
// With resid (int8Bytes(len(v)) long, a residual in int8's layout) its
// values are added to v first, and it then holds what the encoding lost.
func int4Encode(out []byte, v []float32, resid []byte) {
	var blk, rb [int8Block]float32
	for lo := 0; lo < len(v); lo += int8Block {
		hi := min(lo+int8Block, len(v))
		x := blk[:hi-lo]
		o := out[lo/int8Block*int4BlockBytes(int8Block):][:int4BlockBytes(len(x))]
		if resid == nil {
			copy(x, v[lo:hi])
			scale, _ := int4Round(o[4:], x, nil, int8Amax(x))
			binary.LittleEndian.PutUint32(o, math.Float32bits(scale))
			continue
		}
		ro := resid[lo/int8Block*(int8Block+4):][: 4+len(x) : 4+len(x)]
		feedIn(x, v[lo:hi], ro)
		r := rb[:len(x)]
		scale, ramax := int4Round(o[4:], x, r, int8Amax(x))
		binary.LittleEndian.PutUint32(o, math.Float32bits(scale))
		feedOut(ro, r, ramax)
	}
}

// int4Round packs x's nibbles into q ((len(x)+1)/2 bytes) for x's largest
// magnitude amax (int8Amax) and returns the block's scale; with r it sets
// r to x minus the decoded values (zeros when x holds a NaN or Inf) and
// returns r's largest magnitude too, as int8Round does.
func int4Round(q []byte, x, r []float32, amax uint32) (scale float32, ramax uint32) {
	q = q[:(len(x)+1)/2]
	clear(q)
	if amax >= 0x7f800000 {
		clear(r)
		for _, y := range x {
			if isNonFinite(y) {
				return y, 0
			}
		}
	}
	a := float64(math.Float32frombits(amax))
	if a < 1e-30 {
		copy(r, x)
		return 0, amax
	}
	inv, scale := float32(int4Max/a), float32(a/int4Max)
	for j, y := range x {
		k := int8(math.Float32bits(y*inv+roundShift) - roundShiftBits)
		q[j/2] |= byte(k&0xf) << (4 * (j & 1))
		if r != nil {
			r[j] = y - float32(k)*scale
			ramax = max(ramax, math.Float32bits(r[j])&0x7fffffff)
		}
	}
	return scale, ramax
}

// int4Value is the signed value of nibble j of q.
func int4Value(q []byte, j int) int8 { return int8(q[j/2]<<(4*(1-j&1))) >> 4 }

// int4Decode decodes b, int4Bytes(len(dst)) long, into dst; see
// Precision.Decode.
func int4Decode(dst []float32, b []byte) (nonFinite int) {
	nonFinite = -1
	for lo := 0; lo < len(dst); lo += int8Block {
		hi := min(lo+int8Block, len(dst))
		o := b[lo/int8Block*int4BlockBytes(int8Block):]
		scale := math.Float32frombits(binary.LittleEndian.Uint32(o))
		if nonFinite < 0 && isNonFinite(scale) {
			nonFinite = lo
		}
		q := o[4:]
		for j := range dst[lo:hi] {
			dst[lo+j] = float32(int4Value(q, j)) * scale
		}
	}
	return nonFinite
}

// int4Scan is Precision.Scan for int4: the first block with a non-finite
// scale, else the sum of the decoded values' squares.
func int4Scan(b []byte) (nonFinite int, value float32, sumSq float64) {
	blk := int4BlockBytes(int8Block)
	for off, lo := 0, 0; off+4 < len(b); off, lo = off+blk, lo+int8Block {
		scale := math.Float32frombits(binary.LittleEndian.Uint32(b[off:]))
		if isNonFinite(scale) {
			return lo, scale, 0
		}
		var s int64
		q := b[off+4 : min(off+blk, len(b))]
		for j := range 2 * len(q) {
			k := int64(int4Value(q, j))
			s += k * k
		}
		sumSq += float64(scale) * float64(scale) * float64(s)
	}
	return -1, 0, sumSq
}
