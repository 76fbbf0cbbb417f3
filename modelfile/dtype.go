package modelfile

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/nlpodyssey/safetensors"
	"github.com/x448/float16"
)

// The dtypes of a model's tensors (cudaops.Range.Dtype). The flat vector
// is float32; a tensor of another dtype is converted as it is written and
// read: BF16 and F16 round to nearest, ties to even (as torch's casts
// do), the integer dtypes round to the nearest integer and saturate at
// their bounds, BOOL is the value's being non-zero; reading widens
// exactly (an I64 beyond 2^24 in magnitude is the nearest float32).

// dtypeOf is a range's dtype name as safetensors' DType ("" is F32).
func dtypeOf(name string) (safetensors.DType, error) {
	if name == "" {
		return safetensors.F32, nil
	}
	d, err := safetensors.ParseDType(name)
	if err != nil || d == safetensors.U16 || d == safetensors.U32 || d == safetensors.U64 {
		return 0, fmt.Errorf("modelfile: dtype %q is not one a model's tensor may have", name)
	}
	return d, nil
}

// typedView is a safetensors tensor of float32 values written in dtype.
type typedView struct {
	dtype safetensors.DType
	shape []uint64
	v     []float32
}

func (t typedView) DType() safetensors.DType { return t.dtype }
func (t typedView) Shape() []uint64          { return t.shape }
func (t typedView) DataLen() uint64          { return t.dtype.Size() * uint64(len(t.v)) }

// Data is the values converted to the view's dtype, little-endian.
func (t typedView) Data() []byte {
	if t.dtype == safetensors.F32 {
		return f32View{shape: t.shape, v: t.v}.Data()
	}
	b := make([]byte, t.DataLen())
	le := binary.LittleEndian
	for i, x := range t.v {
		switch t.dtype {
		case safetensors.F64:
			le.PutUint64(b[8*i:], math.Float64bits(float64(x)))
		case safetensors.BF16:
			le.PutUint16(b[2*i:], bf16(x))
		case safetensors.F16:
			le.PutUint16(b[2*i:], float16.Fromfloat32(x).Bits())
		case safetensors.I64:
			le.PutUint64(b[8*i:], uint64(toInt(x, math.MinInt64, math.MaxInt64)))
		case safetensors.I32:
			le.PutUint32(b[4*i:], uint32(int32(toInt(x, math.MinInt32, math.MaxInt32))))
		case safetensors.I16:
			le.PutUint16(b[2*i:], uint16(int16(toInt(x, math.MinInt16, math.MaxInt16))))
		case safetensors.I8:
			b[i] = byte(int8(toInt(x, math.MinInt8, math.MaxInt8)))
		case safetensors.U8:
			b[i] = byte(toInt(x, 0, math.MaxUint8))
		case safetensors.BOOL:
			if x != 0 {
				b[i] = 1
			}
		}
	}
	return b
}

// bf16 is x rounded to bfloat16, to nearest with ties to even; a NaN
// stays a (quiet) NaN.
func bf16(x float32) uint16 {
	u := math.Float32bits(x)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}

// toInt is x rounded to the nearest integer (halves away from zero, as
// torch's round of a stored count is exact anyway), saturated to [lo, hi];
// NaN is 0.
func toInt(x float32, lo, hi int64) int64 {
	f := math.Round(float64(x))
	switch {
	case f != f:
		return 0
	case f <= float64(lo):
		return lo
	case f >= float64(hi):
		return hi
	}
	return int64(f)
}

// decodeTo widens n values of dtype in data into dst (len n).
func decodeTo(dst []float32, dtype safetensors.DType, data []byte) {
	le := binary.LittleEndian
	for i := range dst {
		var v float32
		switch dtype {
		case safetensors.F32:
			v = math.Float32frombits(le.Uint32(data[4*i:]))
		case safetensors.F64:
			v = float32(math.Float64frombits(le.Uint64(data[8*i:])))
		case safetensors.BF16:
			v = math.Float32frombits(uint32(le.Uint16(data[2*i:])) << 16)
		case safetensors.F16:
			v = float16.Frombits(le.Uint16(data[2*i:])).Float32()
		case safetensors.I64:
			v = float32(int64(le.Uint64(data[8*i:])))
		case safetensors.I32:
			v = float32(int32(le.Uint32(data[4*i:])))
		case safetensors.I16:
			v = float32(int16(le.Uint16(data[2*i:])))
		case safetensors.I8:
			v = float32(int8(data[i]))
		case safetensors.U8:
			v = float32(data[i])
		case safetensors.BOOL:
			if data[i] != 0 {
				v = 1
			}
		}
		dst[i] = v
	}
}
