package shard

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/vmihailenco/msgpack/v5"

	"dsspmesh/internal/boundedmsgpack"
	"dsspmesh/shardapi"
)

// Snapshot layout (integers big-endian):
//
//	0    8 bytes  "dsspshrd"
//	8    u8       snapshotVersion
//	9    u32      H: header length
//	13   H bytes  the header: a msgpack map, each sub-machine's section
//	     being the keys it owns, written in the order of state.sections
//	13+H θ, then the velocity (hasVelocity: Momentum, or the outer
//	     Nesterov's momentum): little-endian float32, Spec.Len each (the
//	     parameters' section's body)
//
// A state encodes to the same bytes on every replica (docs/design.md,
// "Snapshot sections"); version 1 of the file has, under the outer
// Nesterov, the buffer of the period's arrivals after the momentum.
const (
	snapshotMagic   = "dsspshrd"
	snapshotVersion = 2
	// snapshotWithBuffer is the version whose outer Nesterov state has a
	// buffer beside the momentum.
	snapshotWithBuffer = 1
)

// header is a snapshot's header: its keys in the order written. Reading,
// each key is taken once; a key no section takes is refused.
type header struct {
	keys []string
	vals []any                         // writing
	raw  map[string]msgpack.RawMessage // reading
}

// put adds key with v (encoded as msgpack encodes v's type).
func (h *header) put(key string, v any) {
	h.keys = append(h.keys, key)
	h.vals = append(h.vals, v)
}

// setVersion records a section's version past 1; version reads it back.
func (h *header) setVersion(name string, v uint8) {
	if v != 1 {
		h.put("v."+name, v)
	}
}

func (h *header) version(name string) (v uint8, err error) {
	v = 1
	_, err = h.get("v."+name, &v)
	return v, err
}

// get decodes key into v; it reports whether the key was there.
func (h *header) get(key string, v any) (bool, error) {
	b, ok := h.raw[key]
	if !ok {
		return false, nil
	}
	delete(h.raw, key)
	if len(b) == 0 {
		return true, nil // msgpack's nil: v keeps its zero value
	}
	if err := boundedmsgpack.Unmarshal(b, v); err != nil {
		return true, fmt.Errorf("%s: %w", key, err)
	}
	return true, nil
}

// has reports whether key is there, not taken yet.
func (h *header) has(key string) bool {
	_, ok := h.raw[key]
	return ok
}

// marshal is the header's msgpack: a map of its keys in order.
func (h *header) marshal() ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	if err := enc.EncodeMapLen(len(h.keys)); err != nil {
		return nil, err
	}
	for i, k := range h.keys {
		if err := enc.EncodeString(k); err != nil {
			return nil, err
		}
		if err := enc.Encode(h.vals[i]); err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
	}
	return buf.Bytes(), nil
}

// rest names the keys no section took.
func (h *header) rest() error {
	if len(h.raw) > 0 {
		return fmt.Errorf("keys no section of this build reads: %v", slices.Sorted(func(yield func(string) bool) {
			for k := range h.raw {
				if !yield(k) {
					return
				}
			}
		}))
	}
	return nil
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

// maxSnapshotHeader bounds the msgpack header of a snapshot: the gate's
// table of a few thousand workers is far below it.
const maxSnapshotHeader = 64 << 20

// snapshotChunk is how many bytes of a snapshot's body are read before
// they are decoded into the state.
const snapshotChunk = 1 << 20

// readHeader reads a snapshot's prefix and header from r (at most
// maxSnapshotHeader, its buffer growing only as bytes arrive) and returns
// the file's version and the header to read sections from.
func readHeader(r io.Reader) (uint8, *header, error) {
	pre := len(snapshotMagic) + 5
	b := make([]byte, pre, pre+4096)
	if _, err := io.ReadFull(r, b); err != nil {
		return 0, nil, fmt.Errorf("prefix: %v", err)
	}
	if string(b[:len(snapshotMagic)]) != snapshotMagic {
		return 0, nil, errors.New("not a shard snapshot")
	}
	version := b[len(snapshotMagic)]
	if version != snapshotVersion && version != snapshotWithBuffer {
		return 0, nil, fmt.Errorf("version %d, want %d or %d", version, snapshotVersion, snapshotWithBuffer)
	}
	hl := uint32(b[pre-4])<<24 | uint32(b[pre-3])<<16 | uint32(b[pre-2])<<8 | uint32(b[pre-1])
	if hl > maxSnapshotHeader {
		return 0, nil, fmt.Errorf("header length %d exceeds %d", hl, maxSnapshotHeader)
	}
	b, err := readGrowing(r, b, int(hl))
	if err != nil {
		return 0, nil, fmt.Errorf("header: %v", err)
	}
	h := &header{}
	if err := boundedmsgpack.Unmarshal(b[pre:], &h.raw); err != nil {
		return 0, nil, fmt.Errorf("header: %v", err)
	}
	return version, h, nil
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
