package balance

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// ErrBadEncoding is returned by UnmarshalBinary for bytes it did not write.
var ErrBadEncoding = errors.New("balance: bad encoding")

// encodingVersion is the first byte of MarshalBinary's output.
//
// Layout (big-endian): version u8; global i64; version u64; changed i64;
// η f64; moves u64; reversed u64; blind u8 (0 or 1); n u32; then per
// worker in id order: id length u16, id bytes, batch i64, last move i8, A
// f64, observations u16, and (samples i64, compute_ns i64) per
// observation, oldest first. Version 1 (earlier builds) has no blind byte
// and is read as not blind.
const encodingVersion = 2

// MarshalBinary encodes the dynamic state (not the Config, which its owner
// keeps) in a fixed order: equal states give equal bytes.
func (b *Balancer) MarshalBinary() ([]byte, error) {
	out := []byte{encodingVersion}
	out = binary.BigEndian.AppendUint64(out, uint64(b.global))
	out = binary.BigEndian.AppendUint64(out, b.version)
	out = binary.BigEndian.AppendUint64(out, uint64(b.changed))
	out = binary.BigEndian.AppendUint64(out, math.Float64bits(b.eta))
	out = binary.BigEndian.AppendUint64(out, b.moves)
	out = binary.BigEndian.AppendUint64(out, b.reverse)
	out = append(out, boolByte(b.blind))
	out = binary.BigEndian.AppendUint32(out, uint32(len(b.workers)))
	for _, w := range b.workers {
		if len(w.id) > math.MaxUint16 {
			return nil, fmt.Errorf("balance: worker id of %d bytes", len(w.id))
		}
		out = binary.BigEndian.AppendUint16(out, uint16(len(w.id)))
		out = append(out, w.id...)
		out = binary.BigEndian.AppendUint64(out, uint64(w.batch))
		out = append(out, byte(w.move))
		out = binary.BigEndian.AppendUint64(out, math.Float64bits(w.win.A))
		out = binary.BigEndian.AppendUint16(out, uint16(len(w.win.Obs)))
		for _, o := range w.win.Obs {
			out = binary.BigEndian.AppendUint64(out, uint64(o.Samples))
			out = binary.BigEndian.AppendUint64(out, uint64(o.ComputeNs))
		}
	}
	return out, nil
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// reader takes big-endian fields off a byte slice; the first short read
// sticks.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) take(n int) []byte {
	if r.bad || len(r.b) < n {
		r.bad = true
		return make([]byte, n)
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}
func (r *reader) u8() byte    { return r.take(1)[0] }
func (r *reader) u16() uint16 { return binary.BigEndian.Uint16(r.take(2)) }
func (r *reader) u32() uint32 { return binary.BigEndian.Uint32(r.take(4)) }
func (r *reader) u64() uint64 { return binary.BigEndian.Uint64(r.take(8)) }

// UnmarshalBinary replaces the dynamic state with data's, keeping the
// Config. It refuses (ErrBadEncoding, state unchanged) bytes that are
// short, long, unsorted or outside the Config's limits, and allocates no
// more than data's size warrants.
func (b *Balancer) UnmarshalBinary(data []byte) error {
	r := &reader{b: data}
	version := r.u8()
	if version != 1 && version != encodingVersion {
		return fmt.Errorf("%w: version", ErrBadEncoding)
	}
	nb := Balancer{cfg: b.cfg}
	nb.global = int64(r.u64())
	nb.version = r.u64()
	nb.changed = int64(r.u64())
	nb.eta = math.Float64frombits(r.u64())
	nb.moves, nb.reverse = r.u64(), r.u64()
	if version >= 2 {
		switch r.u8() {
		case 0:
		case 1:
			nb.blind = true
		default:
			r.bad = true
		}
	}
	n := r.u32()
	const minWorker = 2 + 8 + 1 + 8 + 2
	if r.bad || uint64(n) > uint64(len(r.b))/minWorker {
		return fmt.Errorf("%w: %d workers in %d bytes", ErrBadEncoding, n, len(r.b))
	}
	var sum int64
	for i := range int(n) {
		w := &worker{win: Window{Cap: b.cfg.Window}}
		w.id = string(r.take(int(r.u16())))
		w.batch = int64(r.u64())
		w.move = int8(r.u8())
		w.win.A = math.Float64frombits(r.u64())
		k := int(r.u16())
		if r.bad || k > b.cfg.Window || k*16 > len(r.b) {
			return fmt.Errorf("%w: worker %d: %d observations", ErrBadEncoding, i, k)
		}
		w.win.Obs = make([]Obs, k)
		for j := range w.win.Obs {
			w.win.Obs[j] = Obs{Samples: int64(r.u64()), ComputeNs: int64(r.u64())}
			if w.win.Obs[j].Samples <= 0 || w.win.Obs[j].ComputeNs <= 0 {
				r.bad = true
			}
		}
		if r.bad || w.batch < 0 || w.move < -1 || w.move > 1 || !(w.win.A >= 0) || math.IsInf(w.win.A, 0) ||
			(i > 0 && nb.workers[i-1].id >= w.id) {
			return fmt.Errorf("%w: worker %d", ErrBadEncoding, i)
		}
		sum += w.batch
		nb.workers = append(nb.workers, w)
	}
	if r.bad || len(r.b) != 0 || nb.global < 0 || (n > 0 && sum != nb.global) ||
		!(nb.eta >= b.cfg.MinStep) || nb.eta > 1 {
		return fmt.Errorf("%w: trailing bytes, or totals that do not add up", ErrBadEncoding)
	}
	*b = nb
	return nil
}
