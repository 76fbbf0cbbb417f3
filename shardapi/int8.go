package shardapi

import (
	"encoding/binary"
	"math"
)

// The int8 layout: values in blocks of int8Block (the last block may be
// shorter), each block its fp32 scale (4 bytes, little-endian) followed by
// one signed byte per value; value j of a block decodes as
// float32(q_j) × scale, exactly. A block's scale is its largest magnitude
// ÷ 127, so q_j = round(x_j ÷ scale) ∈ [−127, 127]. A block holding a NaN
// or an Inf gets that value as its scale and zero bytes, so it decodes as
// non-finite at the block's first index and a non-finite gradient is still
// refused after encoding.
//
// int8 is for gradients only, and with error feedback: the encoder adds
// what the previous encoding of the same slice lost (a residual the worker
// keeps) before rounding, and keeps what this one loses, so the rounding
// errors of a run cancel instead of adding up. The residual is itself kept
// in this layout (int8Bytes of the slice, all zeros at first): it is at
// most half a step of its block, so its own rounding loses at most 1/508
// of the gradient block's step a push, and a 100 MB model's worker keeps
// 25 MB of residual instead of 100 MB. The parameters a shard
// returns and the sums a leader forms travel in bf16 ([Precision.Params],
// [Precision.Sums]): neither has a sender left to feed their error back to.

// int8Block is the values per scale: 4 bytes of scale per 256 values is
// 1.6 % on top of one byte a value; a smaller block would follow a
// gradient's local magnitude more closely at more bytes.
const int8Block = 256

// int8Bytes is the encoded size of n values.
func int8Bytes(n int) int { return n + 4*((n+int8Block-1)/int8Block) }

// int8Len is the number of values n bytes encode, or false when n is no
// valid size (a block of a scale and no values, or a torn scale).
func int8Len(n int) (int, bool) {
	full, rem := n/(int8Block+4), n%(int8Block+4)
	if rem == 0 {
		return full * int8Block, true
	}
	if rem <= 4 {
		return 0, false
	}
	return full*int8Block + rem - 4, true
}

// int8Encode encodes v into out (int8Bytes(len(v)) long) block by block.
// With resid (int8Bytes(len(v)) long, a residual in this layout) its
// values are added to v first, and it then holds what the encoding lost:
// the value encoded minus the value a receiver decodes.
func int8Encode(out []byte, v []float32, resid []byte) {
	var blk, rb [int8Block]float32
	for lo := 0; lo < len(v); lo += int8Block {
		hi := min(lo+int8Block, len(v))
		x := blk[:hi-lo]
		off := lo / int8Block * (int8Block + 4)
		o := out[off:][: 4+len(x) : 4+len(x)]
		if resid == nil {
			copy(x, v[lo:hi])
			binary.LittleEndian.PutUint32(o, math.Float32bits(int8Quantize(o[4:], x)))
			continue
		}
		ro := resid[off:][: 4+len(x) : 4+len(x)]
		feedIn(x, v[lo:hi], ro)
		r := rb[:len(x)]
		scale, ramax := int8Round(o[4:], x, r, int8Amax(x))
		binary.LittleEndian.PutUint32(o, math.Float32bits(scale))
		feedOut(ro, r, ramax)
	}
}

// feedIn sets x to v plus what the residual block ro (int8's layout, as
// long as v's block) holds: the error feedback int8 and int4 add before
// rounding.
func feedIn(x, v []float32, ro []byte) {
	rs, rq := math.Float32frombits(binary.LittleEndian.Uint32(ro)), ro[4:]
	for j, y := range v {
		x[j] = y + float32(int8(rq[j]))*rs
	}
}

// feedOut keeps r, what this encoding of a block lost (its largest
// magnitude ramax), in the residual block ro.
func feedOut(ro []byte, r []float32, ramax uint32) {
	rscale, _ := int8Round(ro[4:], r, nil, ramax)
	binary.LittleEndian.PutUint32(ro, math.Float32bits(rscale))
}

// int8Quantize writes x's bytes into q and returns the block's scale.
func int8Quantize(q []byte, x []float32) float32 {
	scale, _ := int8Round(q, x, nil, int8Amax(x))
	return scale
}

// int8Amax is the largest of x's magnitudes as float32 bits: the bits
// with the sign cleared order like the magnitudes and put NaN and Inf
// above every finite value. Branch-free (an encoder of 10 ns a value cost
// a tenth of a mesh's CPU).
func int8Amax(x []float32) uint32 {
	var amax uint32
	for _, y := range x {
		amax = max(amax, math.Float32bits(y)&0x7fffffff)
	}
	return amax
}

// int8Round writes x's bytes into q for x's largest magnitude amax
// (int8Amax) and returns the block's scale; with r (len(x)) it sets r to
// x minus the decoded values, or to zeros when x holds a NaN or Inf (the
// push is refused; a NaN kept would poison every later one), and returns
// r's largest magnitude too. Branch-free in the loops: rounding adds
// 1.5·2²³, after which the float's low mantissa bits are round(f) (to
// nearest even) + 2²², for |f| ≤ 127.
func int8Round(q []byte, x, r []float32, amax uint32) (scale float32, ramax uint32) {
	if amax >= 0x7f800000 {
		clear(q)
		clear(r)
		for _, y := range x {
			if isNonFinite(y) {
				return y, 0
			}
		}
	}
	// Below ~1e-30 the reciprocal would overflow float32; such a block
	// encodes as zeros and, under feedback, stays in the residual.
	a := float64(math.Float32frombits(amax))
	if a < 1e-30 {
		clear(q)
		copy(r, x)
		return 0, amax
	}
	inv, scale := float32(127/a), float32(a/127)
	q = q[:len(x)]
	if r == nil {
		for j, y := range x {
			q[j] = byte(math.Float32bits(y*inv+roundShift) - roundShiftBits)
		}
		return scale, 0
	}
	r = r[:len(x)]
	for j, y := range x {
		k := int8(math.Float32bits(y*inv+roundShift) - roundShiftBits)
		q[j] = byte(k)
		r[j] = y - float32(k)*scale
		ramax = max(ramax, math.Float32bits(r[j])&0x7fffffff)
	}
	return scale, ramax
}

// roundShift is 1.5·2²³: a float32 of that magnitude has no fraction bits.
const (
	roundShift     = 12582912
	roundShiftBits = 0x4b400000
)

// int8Decode decodes b, int8Bytes(len(dst)) long, into dst; see
// Precision.Decode.
func int8Decode(dst []float32, b []byte) (nonFinite int) {
	nonFinite = -1
	for lo := 0; lo < len(dst); lo += int8Block {
		hi := min(lo+int8Block, len(dst))
		o := b[lo/int8Block*(int8Block+4):]
		scale := math.Float32frombits(binary.LittleEndian.Uint32(o))
		if nonFinite < 0 && isNonFinite(scale) {
			nonFinite = lo
		}
		q := o[4 : 4+hi-lo]
		for j := range dst[lo:hi] {
			dst[lo+j] = float32(int8(q[j])) * scale
		}
	}
	return nonFinite
}

// int8Scan is Precision.Scan for int8: the first block with a non-finite
// scale, else the sum of the decoded values' squares.
func int8Scan(b []byte) (nonFinite int, value float32, sumSq float64) {
	for off, lo := 0, 0; off+4 < len(b); off, lo = off+int8Block+4, lo+int8Block {
		scale := math.Float32frombits(binary.LittleEndian.Uint32(b[off:]))
		if isNonFinite(scale) {
			return lo, scale, 0
		}
		var s int64
		for _, q := range b[off+4 : min(off+4+int8Block, len(b))] {
			s += int64(int8(q)) * int64(int8(q))
		}
		sumSq += float64(scale) * float64(scale) * float64(s)
	}
	return -1, 0, sumSq
}

// isNonFinite reports NaN or ±Inf.
func isNonFinite(x float32) bool { return math.Float32bits(x)&0x7f800000 == 0x7f800000 }
