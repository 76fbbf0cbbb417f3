package shard

import (
	"dsspmesh/shardapi"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/vmihailenco/msgpack/v5"

	"dsspmesh/clock"
	"dsspmesh/internal/boundedmsgpack"
)

// Snapshot layout (integers big-endian):
//
//	0    8 bytes  "dsspshrd"
//	8    u8       snapshotVersion
//	9    u32      H: header length
//	13   H bytes  msgpack snapshotHeader (the gate as clock's own encoding)
//	13+H θ, then the velocity (hasVelocity: Momentum, or the outer
//	     Nesterov's momentum): little-endian float32, Spec.Len each
//
// Every field is written in a fixed order and the gate's encoding is
// deterministic, so equal states give equal bytes (and state hashes).
// Version 1 (earlier builds) is the same with, under the outer Nesterov,
// the buffer of the period's arrivals after the momentum; it is read and
// the buffer folded into the momentum as the rule of this build keeps it
// (outer.go: m ← μ·m + b/N while a period is under way).
const (
	snapshotMagic   = "dsspshrd"
	snapshotVersion = 2
	// snapshotWithBuffer is the version whose outer Nesterov state has a
	// buffer beside the momentum.
	snapshotWithBuffer = 1
)

type snapshotHeader struct {
	Initialized bool          `msgpack:"init"`
	Spec        shardapi.Spec `msgpack:"spec"`
	Samples     int64         `msgpack:"samples"`
	Pushes      uint64        `msgpack:"pushes"`
	Duplicates  uint64        `msgpack:"dups"`
	Rejected    []uint64      `msgpack:"rejected"`
	Gate        []byte        `msgpack:"gate"`
	LastIndex   uint64        `msgpack:"index"`
	// Balance is shard 0's balance layer (balance.go), absent otherwise.
	Balance *balanceSnapshot `msgpack:"bal,omitempty"`
	// Arrivals is the outer Nesterov's count since its last momentum step
	// (outer.go), 0 otherwise; below maxArrivals.
	Arrivals int64 `msgpack:"arr,omitempty"`
	// Identities are the revoked ids and pinned keys (identity.go);
	// absent when there are none, and in snapshots of earlier builds.
	Identities *identitySnapshot `msgpack:"ids,omitempty"`
}

// headLocked encodes the snapshot's prefix and header: everything before θ.
func (f *FSM) headLocked() ([]byte, error) {
	h := snapshotHeader{Initialized: f.initialized, Spec: f.spec, Samples: f.samples, Pushes: f.pushes,
		Duplicates: f.duplicates, Rejected: f.rejected[1:], LastIndex: f.lastIndex, Arrivals: f.arrivals}
	if f.gate != nil {
		g, err := f.gate.MarshalBinary()
		if err != nil {
			return nil, fmt.Errorf("shard %d: encode gate: %w", f.shard, err)
		}
		h.Gate = g
	}
	bal, err := f.bal.encode()
	if err != nil {
		return nil, fmt.Errorf("shard %d: encode balance: %w", f.shard, err)
	}
	h.Balance = bal
	h.Identities = f.ids.encode()
	hb, err := msgpack.Marshal(&h)
	if err != nil {
		return nil, fmt.Errorf("shard %d: encode snapshot header: %w", f.shard, err)
	}
	b := make([]byte, 0, len(snapshotMagic)+5+len(hb))
	b = append(b, snapshotMagic...)
	b = append(b, snapshotVersion)
	b = binary.BigEndian.AppendUint32(b, uint32(len(hb)))
	return append(b, hb...), nil
}

// encodeLocked is the whole snapshot in one slice (for the state hash).
func (f *FSM) encodeLocked() ([]byte, error) {
	head, err := f.headLocked()
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, len(head)+4*(len(f.theta)+len(f.velocity)))
	b = append(b, head...)
	b = shardapi.FP32.Append(b, f.theta)
	return shardapi.FP32.Append(b, f.velocity), nil
}

// writeBody writes θ and the velocity (possibly empty) as a snapshot's
// body, through one chunk of snapshotChunk bytes.
func writeBody(w io.Writer, vs ...[]float32) error {
	chunk := make([]byte, 0, snapshotChunk)
	for _, v := range vs {
		for len(v) > 0 {
			n := min(len(v), snapshotChunk/4)
			if _, err := w.Write(shardapi.FP32.Append(chunk[:0], v[:n])); err != nil {
				return err
			}
			v = v[n:]
		}
	}
	return nil
}

// snapshotState is a snapshot read and checked (readSnapshot), ready to
// become an FSM's state.
type snapshotState struct {
	h               snapshotHeader
	theta, velocity []float32
	gate            *clock.Gate
	bal             *balanceState
	ids             identityState
}

// installLocked replaces the state with st's.
func (f *FSM) installLocked(st *snapshotState) {
	h := st.h
	f.initialized, f.spec, f.opt = h.Initialized, h.Spec, h.Spec.Optimizer
	f.theta, f.velocity, f.gate, f.bal, f.ids = st.theta, st.velocity, st.gate, st.bal, st.ids
	f.arrivals = h.Arrivals
	f.samples, f.pushes, f.duplicates, f.lastIndex = h.Samples, h.Pushes, h.Duplicates, h.LastIndex
	f.frozen = nil // a snapshot being persisted keeps the arrays it took
	f.rejected = [shardapi.NumReasons]uint64{}
	copy(f.rejected[1:], h.Rejected)
	f.sum, f.grad = nil, nil
}

// maxSnapshotHeader bounds the msgpack header of a snapshot: the gate's
// table of a few thousand workers is far below it.
const maxSnapshotHeader = 64 << 20

// snapshotChunk is how many bytes of a snapshot's body are read before
// they are decoded into the state.
const snapshotChunk = 1 << 20

// readSnapshot reads one snapshot from r and checks it. It reads the
// prefix and the header (at most maxSnapshotHeader, its buffer growing
// only as bytes arrive), computes from the header the exact length of the
// body a valid snapshot has, and decodes the body chunk by chunk straight
// into θ and the velocity, allocated once the body's first chunk has
// arrived; then it refuses the snapshot if r has even one byte more. So a
// restore holds the state and one chunk, never a second copy of the state
// in bytes (25 MB for a large shard), and a reader that never ends, or a
// header that lies about its size, costs at most the largest valid state
// (bounded by shardapi.MaxShardLen) plus a chunk.
func readSnapshot(r io.Reader) (*snapshotState, error) {
	bad := func(format string, args ...any) (*snapshotState, error) {
		return nil, fmt.Errorf("%w: %s", shardapi.ErrBadSnapshot, fmt.Sprintf(format, args...))
	}
	pre := len(snapshotMagic) + 5
	b := make([]byte, pre, pre+4096)
	if _, err := io.ReadFull(r, b); err != nil {
		return bad("prefix: %v", err)
	}
	if string(b[:len(snapshotMagic)]) != snapshotMagic {
		return bad("not a shard snapshot")
	}
	version := b[len(snapshotMagic)]
	if version != snapshotVersion && version != snapshotWithBuffer {
		return bad("version %d, want %d or %d", version, snapshotVersion, snapshotWithBuffer)
	}
	hl := binary.BigEndian.Uint32(b[len(snapshotMagic)+1:])
	if hl > maxSnapshotHeader {
		return bad("header length %d exceeds %d", hl, maxSnapshotHeader)
	}
	b, err := readGrowing(r, b, int(hl))
	if err != nil {
		return bad("header: %v", err)
	}
	st := &snapshotState{}
	h := &st.h
	if err := boundedmsgpack.Unmarshal(b[pre:], h); err != nil {
		return bad("header: %v", err)
	}
	// Older builds knew fewer reasons; their counters come first.
	if len(h.Rejected) > int(shardapi.NumReasons)-1 {
		return bad("%d rejection counters, this build knows %d", len(h.Rejected), int(shardapi.NumReasons)-1)
	}
	if h.Arrivals < 0 || h.Arrivals >= maxArrivals || h.Arrivals != 0 && !h.Spec.Outer.Nesterov() {
		return bad("outer arrivals %d (outer %s): must be in [0, %d) and 0 without nesterov", h.Arrivals, h.Spec.Outer.Kind, maxArrivals)
	}
	if st.ids, err = decodeIdentities(h.Identities); err != nil {
		return bad("identities: %v", err)
	}
	if !h.Initialized {
		if len(h.Gate) != 0 || h.Balance != nil {
			return bad("state in an uninitialised snapshot")
		}
		if err := readEnd(r); err != nil {
			return bad("%v", err)
		}
		return st, nil
	}
	if err := h.Spec.Validate(); err != nil {
		return bad("%v", err)
	}
	var chunk []byte
	if st.theta, chunk, err = readFloats(r, nil, h.Spec.Len); err != nil {
		return bad("parameters: %v", err)
	}
	if hasVelocity(h.Spec) {
		if st.velocity, _, err = readFloats(r, chunk, h.Spec.Len); err != nil {
			return bad("velocity: %v", err)
		}
	}
	var buf []float32
	if version == snapshotWithBuffer && h.Spec.Outer.Nesterov() {
		if buf, _, err = readFloats(r, chunk, h.Spec.Len); err != nil {
			return bad("outer buffer: %v", err)
		}
	}
	if err := readEnd(r); err != nil {
		return bad("%v", err)
	}
	if i := max(firstNonFinite(st.theta), firstNonFinite(st.velocity), firstNonFinite(buf)); i >= 0 {
		return bad("parameter %d is not finite", i)
	}
	st.gate = &clock.Gate{}
	if err := st.gate.UnmarshalBinary(h.Gate); err != nil {
		return bad("gate: %v", err)
	}
	if h.Arrivals > 0 && buf != nil {
		if i := foldBuffer(h.Spec.Outer, st.gate.Len(), st.velocity, buf); i >= 0 {
			return bad("momentum %d with the outer buffer folded in is not finite", i)
		}
	}
	if st.bal, err = decodeBalance(h.Spec, h.Balance); err != nil {
		return bad("balance: %v", err)
	}
	return st, nil
}

// foldBuffer turns a version-1 snapshot's outer state in the middle of a
// momentum period (momentum m, buffer b of the period's arrivals, with
// workers in the gate) into this build's: m ← μ·m + b/N. It returns the
// first index whose result is out of the momentum's domain, or −1.
func foldBuffer(o shardapi.Outer, workers int, m, b []float32) int {
	r := ratesOf(o, workers)
	for i, bi := range b {
		m[i] = float32(r.mu*m[i]) + float32(r.inv*bi)
		if outOfDomain(m[i]) {
			return i
		}
	}
	return -1
}

// readFloats reads n little-endian float32 from r chunk by chunk (through
// chunk, allocated if nil) and returns them; the slice of n is allocated
// once the first chunk has arrived.
func readFloats(r io.Reader, chunk []byte, n int) ([]float32, []byte, error) {
	if chunk == nil {
		chunk = make([]byte, min(shardapi.FP32.Bytes(n), snapshotChunk))
	}
	var v []float32
	for lo := 0; lo < n; {
		c := chunk[:min(len(chunk), shardapi.FP32.Bytes(n-lo))]
		if _, err := io.ReadFull(r, c); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, chunk, err
		}
		if v == nil {
			v = make([]float32, n)
		}
		k := len(c) / 4
		_, _ = shardapi.FP32.Decode(v[lo:lo+k], c)
		lo += k
	}
	return v, chunk, nil
}

// readEnd refuses a reader with bytes left after a snapshot.
func readEnd(r io.Reader) error {
	var one [1]byte
	if n, _ := io.ReadFull(r, one[:]); n > 0 {
		return errors.New("longer than its header describes")
	}
	return nil
}

// readGrowing appends exactly n bytes from r to b, growing b by at most
// snapshotChunk ahead of what arrived.
func readGrowing(r io.Reader, b []byte, n int) ([]byte, error) {
	for n > 0 {
		step := min(n, snapshotChunk)
		b = slices.Grow(b, step)
		got, err := io.ReadFull(r, b[len(b):len(b)+step])
		b = b[:len(b)+got]
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		n -= step
	}
	return b, nil
}
