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
//	13+H θ then, for Momentum, the velocity: little-endian float32, Spec.Len each
//
// Every field is written in a fixed order and the gate's encoding is
// deterministic, so equal states give equal bytes (and state hashes).
const (
	snapshotMagic   = "dsspshrd"
	snapshotVersion = 1
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
}

func (f *FSM) encodeLocked() ([]byte, error) {
	h := snapshotHeader{Initialized: f.initialized, Spec: f.spec, Samples: f.samples, Pushes: f.pushes,
		Duplicates: f.duplicates, Rejected: f.rejected[1:], LastIndex: f.lastIndex}
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
	hb, err := msgpack.Marshal(&h)
	if err != nil {
		return nil, fmt.Errorf("shard %d: encode snapshot header: %w", f.shard, err)
	}
	b := make([]byte, 0, len(snapshotMagic)+5+len(hb)+4*(len(f.theta)+len(f.velocity)))
	b = append(b, snapshotMagic...)
	b = append(b, snapshotVersion)
	b = binary.BigEndian.AppendUint32(b, uint32(len(hb)))
	b = append(b, hb...)
	b = shardapi.FP32.Append(b, f.theta)
	return shardapi.FP32.Append(b, f.velocity), nil
}

// decodeLocked replaces the state with b's; on error nothing changed.
func (f *FSM) decodeLocked(b []byte) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("shard %d: %w: %s", f.shard, shardapi.ErrBadSnapshot, fmt.Sprintf(format, args...))
	}
	pre := len(snapshotMagic) + 5
	if len(b) < pre || string(b[:len(snapshotMagic)]) != snapshotMagic {
		return bad("not a shard snapshot")
	}
	if v := b[len(snapshotMagic)]; v != snapshotVersion {
		return bad("version %d, want %d", v, snapshotVersion)
	}
	hl := binary.BigEndian.Uint32(b[len(snapshotMagic)+1:])
	if uint64(hl) > uint64(len(b)-pre) {
		return bad("header length %d", hl)
	}
	var h snapshotHeader
	if err := boundedmsgpack.Unmarshal(b[pre:pre+int(hl)], &h); err != nil {
		return bad("header: %v", err)
	}
	body := b[pre+int(hl):]
	// Older builds knew fewer reasons; their counters come first.
	if len(h.Rejected) > int(shardapi.NumReasons)-1 {
		return bad("%d rejection counters, this build knows %d", len(h.Rejected), int(shardapi.NumReasons)-1)
	}
	var theta, velocity []float32
	var gate *clock.Gate
	var bal *balanceState
	if h.Initialized {
		if err := h.Spec.Validate(); err != nil {
			return bad("%v", err)
		}
		n, vectors := h.Spec.Len, 1
		if h.Spec.Optimizer.Kind == shardapi.Momentum {
			vectors = 2
		}
		// Check the size before allocating: Len comes from the snapshot.
		if len(body) != shardapi.FP32.Bytes(n*vectors) {
			return bad("%d parameter bytes for length %d", len(body), n)
		}
		theta = make([]float32, n)
		if vectors == 2 {
			velocity = make([]float32, n)
		}
		_, _ = shardapi.FP32.Decode(theta, body[:shardapi.FP32.Bytes(n)])
		_, _ = shardapi.FP32.Decode(velocity, body[shardapi.FP32.Bytes(n):])
		if i := max(firstNonFinite(theta), firstNonFinite(velocity)); i >= 0 {
			return bad("parameter %d is not finite", i)
		}
		gate = &clock.Gate{}
		if err := gate.UnmarshalBinary(h.Gate); err != nil {
			return bad("gate: %v", err)
		}
		var err error
		if bal, err = decodeBalance(h.Spec, h.Balance); err != nil {
			return bad("balance: %v", err)
		}
	} else if len(body) != 0 || len(h.Gate) != 0 || h.Balance != nil {
		return bad("state in an uninitialised snapshot")
	}
	f.initialized, f.spec, f.opt = h.Initialized, h.Spec, h.Spec.Optimizer
	f.theta, f.velocity, f.gate, f.bal = theta, velocity, gate, bal
	f.samples, f.pushes, f.duplicates, f.lastIndex = h.Samples, h.Pushes, h.Duplicates, h.LastIndex
	f.rejected = [shardapi.NumReasons]uint64{}
	copy(f.rejected[1:], h.Rejected)
	f.sum, f.grad = nil, nil
	return nil
}

// maxSnapshotHeader bounds the msgpack header of a snapshot: the gate's
// table of a few thousand workers is far below it.
const maxSnapshotHeader = 64 << 20

// snapshotChunk bounds how far the buffer runs ahead of the bytes read.
const snapshotChunk = 16 << 20

// readSnapshot reads one snapshot from r and returns its bytes. It reads
// the prefix and the header (at most maxSnapshotHeader), computes from the
// header the exact length of the body a valid snapshot has, reads that
// much, growing its buffer only as bytes arrive, and then refuses the
// snapshot if r has even one byte more. So a reader that never ends, or
// a header that lies about its size, costs at most the largest valid
// snapshot (bounded by maxShardLen) plus snapshotChunk.
func readSnapshot(r io.Reader) ([]byte, error) {
	bad := func(format string, args ...any) ([]byte, error) {
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
	hl := binary.BigEndian.Uint32(b[len(snapshotMagic)+1:])
	if hl > maxSnapshotHeader {
		return bad("header length %d exceeds %d", hl, maxSnapshotHeader)
	}
	b, err := readGrowing(r, b, int(hl))
	if err != nil {
		return bad("header: %v", err)
	}
	var h snapshotHeader
	if err := boundedmsgpack.Unmarshal(b[pre:], &h); err != nil {
		return bad("header: %v", err)
	}
	body := 0
	if h.Initialized {
		if err := h.Spec.Validate(); err != nil {
			return bad("%v", err)
		}
		body = 4 * h.Spec.Len
		if h.Spec.Optimizer.Kind == shardapi.Momentum {
			body *= 2
		}
	}
	if b, err = readGrowing(r, b, body); err != nil {
		return bad("parameters: %v", err)
	}
	var one [1]byte
	if n, _ := io.ReadFull(r, one[:]); n > 0 {
		return bad("longer than the %d bytes its header describes", len(b))
	}
	return b, nil
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
