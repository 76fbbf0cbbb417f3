package shardapi

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
)

// The tensor codec: the one layout of every tensor a shard's data path
// carries — a push's gradient and an OK reply's parameter slice on the
// wire, the gradients of a push entry in the raft log — in the shard's
// [Spec.Precision] (an OK's slice and a leader's sum in its Params and
// Sums: bf16 under int8 and int4); and, always in fp32, the initial θ of an Init
// entry, a snapshot's parameters and a read's slice. The client, the service and
// the FSM all encode and decode through it.
//
//	fp32: n values, 4 bytes each, IEEE-754 binary32, little-endian
//	bf16: n values, 2 bytes each, the upper half of the binary32, little-endian
//	int8: blocks of 256 values, each an fp32 scale and a signed byte a
//	      value (int8.go); gradients only, with error feedback
//	int4: int8's blocks with a signed nibble a value (int4.go); gradients
//	      only, with error feedback
//
// bf16 encoding rounds to nearest, ties to even; a finite value beyond
// bf16's range (|x| ≥ 2^128·(1−2^−9)) rounds to ±Inf, as IEEE rounding
// does, and a NaN stays a NaN (quiet, sign kept), so a non-finite
// gradient is still refused after encoding. Decoding is exact. A value is
// non-finite when its exponent bits are all ones (NaN, ±Inf).

// Precision is how a tensor's values are laid out. The zero value is fp32,
// so a Spec from a build before precisions decodes as fp32.
type Precision uint8

const (
	FP32 Precision = iota // exact float32, 4 bytes a value
	BF16                  // bfloat16, 2 bytes a value
	INT8                  // a signed byte a value and an fp32 scale per 256 (int8.go)
	INT4                  // a signed nibble a value and an fp32 scale per 256 (int4.go)
)

const knownPrecisions = "fp32, bf16, int8, int4"

// ParsePrecision reads "fp32", "bf16", "int8" or "int4".
func ParsePrecision(s string) (Precision, error) {
	switch s {
	case "fp32":
		return FP32, nil
	case "bf16":
		return BF16, nil
	case "int8":
		return INT8, nil
	case "int4":
		return INT4, nil
	}
	return 0, fmt.Errorf("precision %q unknown (known: %s)", s, knownPrecisions)
}

// String names the precision: fp32, bf16, int8 or int4.
func (p Precision) String() string {
	switch p {
	case FP32:
		return "fp32"
	case BF16:
		return "bf16"
	case INT8:
		return "int8"
	case INT4:
		return "int4"
	}
	return fmt.Sprintf("precision(%d)", uint8(p))
}

// Valid reports whether p is a known precision.
func (p Precision) Valid() bool { return p <= INT4 }

// feedback reports whether p rounds gradients with error feedback (int8,
// int4), its residual kept in int8's layout.
func (p Precision) feedback() bool { return p == INT8 || p == INT4 }

// Params is the precision of the parameter slices a shard returns to a
// worker that pushes in p: p itself, but bf16 for int8 and int4, whose
// rounding is fed back only by a gradient's sender.
func (p Precision) Params() Precision {
	if p.feedback() {
		return BF16
	}
	return p
}

// Sums is the precision of the sum a leader forms of a group of pushes in
// p (aggregate.go): like Params, bf16 for int8.
func (p Precision) Sums() Precision { return p.Params() }

// Bytes is the encoded size of n values.
func (p Precision) Bytes(n int) int {
	switch p {
	case BF16:
		return 2 * n
	case INT8:
		return int8Bytes(n)
	case INT4:
		return int4Bytes(n)
	}
	return 4 * n
}

// ToBF16 rounds x to bfloat16 bits, to nearest with ties to even.
func ToBF16(x float32) uint16 {
	u := math.Float32bits(x)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x0040 // NaN: quiet, sign kept (truncation could make it Inf)
	}
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}

// FromBF16 is the float32 of bfloat16 bits h (exact).
func FromBF16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// Append appends v to dst encoded.
func (p Precision) Append(dst []byte, v []float32) []byte { return p.AppendFeedback(dst, v, nil) }

// AppendFeedback is Append with error feedback for int8: resid (from
// [Precision.NewResidual], zero at first) is added to v before rounding
// and then holds what this encoding lost (int8.go); v is only read.
// Other precisions ignore resid: fp32 is exact and bf16 trains as fp32
// does (dssp up to 97 %: 102 s in bf16, 118 s in fp32, one run each).
func (p Precision) AppendFeedback(dst []byte, v []float32, resid []byte) []byte {
	n := len(dst)
	dst = slices.Grow(dst, p.Bytes(len(v)))[:n+p.Bytes(len(v))]
	out := dst[n:]
	switch p {
	case INT8:
		int8Encode(out, v, resid)
	case INT4:
		int4Encode(out, v, resid)
	default:
		p.encode(out, v)
	}
	return dst
}

// encode writes v's fp32 or bf16 encoding into out (p.Bytes(len(v)) long).
func (p Precision) encode(out []byte, v []float32) {
	if p == BF16 {
		for i, x := range v {
			binary.LittleEndian.PutUint16(out[2*i:], ToBF16(x))
		}
		return
	}
	for i, x := range v {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(x))
	}
}

// NewResidual returns the zero error-feedback residual of n values for
// AppendFeedback and an [Encoder]: int8Bytes(n) bytes under int8 and
// int4 (the residual is kept in int8's layout, int8.go), nil otherwise.
func (p Precision) NewResidual(n int) []byte {
	if !p.feedback() {
		return nil
	}
	return make([]byte, int8Bytes(n))
}

// Decode decodes b into dst, which must hold exactly the values b encodes,
// and returns the index of the first non-finite value, or −1. Every value
// is decoded, non-finite ones included.
func (p Precision) Decode(dst []float32, b []byte) (nonFinite int, err error) {
	if len(b) != p.Bytes(len(dst)) {
		return -1, fmt.Errorf("%w: %d bytes for %d %s values", ErrBadTensor, len(b), len(dst), p)
	}
	switch p {
	case INT8:
		return int8Decode(dst, b), nil
	case INT4:
		return int4Decode(dst, b), nil
	}
	nonFinite = -1
	if p == BF16 {
		for i := range dst {
			h := binary.LittleEndian.Uint16(b[2*i:])
			if nonFinite < 0 && h&0x7f80 == 0x7f80 {
				nonFinite = i
			}
			dst[i] = FromBF16(h)
		}
		return nonFinite, nil
	}
	for i := range dst {
		u := binary.LittleEndian.Uint32(b[4*i:])
		if nonFinite < 0 && u&0x7f800000 == 0x7f800000 {
			nonFinite = i
		}
		dst[i] = math.Float32frombits(u)
	}
	return nonFinite, nil
}

// DecodeFrom is Decode of the encoding of len(dst) values read from r, a
// chunk at a time (decodeChunk bytes, no buffer of the encoding's size):
// a receiver decodes a payload as it arrives (mesh.Stream.RecvFrameTo).
func (p Precision) DecodeFrom(dst []float32, r io.Reader) (nonFinite int, err error) {
	buf := chunks.Get().(*[decodeChunk]byte)
	defer chunks.Put(buf)
	per := decodeChunk / p.Bytes(1) // values a chunk: whole values, whole int8 blocks
	switch p {
	case INT8:
		per = decodeChunk / (int8Block + 4) * int8Block
	case INT4:
		per = decodeChunk / int4BlockBytes(int8Block) * int8Block
	}
	nonFinite = -1
	for lo := 0; lo < len(dst); lo += per {
		v := dst[lo:min(len(dst), lo+per)]
		b := buf[:p.Bytes(len(v))]
		if _, err := io.ReadFull(r, b); err != nil {
			return -1, err
		}
		if nf, _ := p.Decode(v, b); nf >= 0 && nonFinite < 0 {
			nonFinite = lo + nf
		}
	}
	return nonFinite, nil
}

// decodeChunk is the bytes DecodeFrom reads at a time.
const decodeChunk = 64 << 10

var chunks = sync.Pool{New: func() any { return new([decodeChunk]byte) }}

// values is how many values an encoding of n bytes holds; it fails if n
// is no whole number of them.
func (p Precision) values(n int) (int, error) {
	v, ok := n/p.Bytes(1), n%p.Bytes(1) == 0
	switch p {
	case INT8:
		v, ok = int8Len(n)
	case INT4:
		v, ok = int4Len(n)
	}
	if !ok {
		return 0, fmt.Errorf("%w: %d bytes is not a whole number of %s values", ErrBadTensor, n, p)
	}
	return v, nil
}

// Scan returns the first non-finite value of b and its index (−1 if none)
// and, when all are finite, the sum of their squares, without decoding
// into a buffer. A trailing partial value is ignored.
func (p Precision) Scan(b []byte) (nonFinite int, value float32, sumSq float64) {
	switch p {
	case INT8:
		return int8Scan(b)
	case INT4:
		return int4Scan(b)
	case BF16:
		for i := 0; i+2 <= len(b); i += 2 {
			h := binary.LittleEndian.Uint16(b[i:])
			x := FromBF16(h)
			if h&0x7f80 == 0x7f80 {
				return i / 2, x, 0
			}
			sumSq += float64(x) * float64(x)
		}
		return -1, 0, sumSq
	}
	for i := 0; i+4 <= len(b); i += 4 {
		u := binary.LittleEndian.Uint32(b[i:])
		x := math.Float32frombits(u)
		if u&0x7f800000 == 0x7f800000 {
			return i / 4, x, 0
		}
		sumSq += float64(x) * float64(x)
	}
	return -1, 0, sumSq
}
