package shardapi

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
)

// The tensor codec: the one layout of every tensor a shard's data path
// carries — a push's gradient and an OK reply's parameter slice on the
// wire, the gradients of a push entry and the initial θ in the raft log.
// The client, the service and the FSM all encode and decode through it.
//
//	fp32: n values, 4 bytes each, IEEE-754 binary32 little-endian
//
// A value is non-finite when its exponent bits are all ones (NaN, ±Inf).

// Precision is how a tensor's values are laid out.
type Precision uint8

// FP32 is the only precision so far: exact float32.
const FP32 Precision = 0

// String names the precision: fp32.
func (p Precision) String() string {
	switch p {
	case FP32:
		return "fp32"
	}
	return fmt.Sprintf("precision(%d)", uint8(p))
}

// Bytes is the encoded size of n values.
func (p Precision) Bytes(n int) int { return 4 * n }

// Append appends v to dst encoded.
func (p Precision) Append(dst []byte, v []float32) []byte {
	n := len(dst)
	dst = slices.Grow(dst, 4*len(v))[:n+4*len(v)]
	out := dst[n:]
	for i, x := range v {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(x))
	}
	return dst
}

// Decode decodes b into dst, which must hold exactly the values b encodes,
// and returns the index of the first non-finite value, or −1. Every value
// is decoded, non-finite ones included.
func (p Precision) Decode(dst []float32, b []byte) (nonFinite int, err error) {
	if len(b) != p.Bytes(len(dst)) {
		return -1, fmt.Errorf("%w: %d bytes for %d %s values", ErrBadTensor, len(b), len(dst), p)
	}
	nonFinite = -1
	for i := range dst {
		u := binary.LittleEndian.Uint32(b[4*i:])
		if nonFinite < 0 && u&0x7f800000 == 0x7f800000 {
			nonFinite = i
		}
		dst[i] = math.Float32frombits(u)
	}
	return nonFinite, nil
}

// Len is the number of values b encodes; it fails if len(b) is not a
// whole number of values.
func (p Precision) Len(b []byte) (int, error) {
	if len(b)%4 != 0 {
		return 0, fmt.Errorf("%w: %d bytes is not a whole number of %s values", ErrBadTensor, len(b), p)
	}
	return len(b) / 4, nil
}

// Scan returns the first non-finite value of b and its index (−1 if none)
// and, when all are finite, the sum of their squares, without decoding
// into a buffer. b must hold whole values.
func (p Precision) Scan(b []byte) (nonFinite int, value float32, sumSq float64) {
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
