// Package boundedmsgpack decodes msgpack that did not come from this
// process — a peer's frame header, a replicated Raft log entry, a
// snapshot — without letting the bytes make the decoder allocate far more
// than their own size: msgpack v5.4.1 reserves the declared length of an
// array or map up front, so a 5-byte input can ask for 4 GiB. [Validate]
// walks the encoding first and refuses a declared length that does not
// fit in the bytes that remain, or nesting deeper than a limit; [Unmarshal]
// validates, then decodes. The mesh's frames and shard's log entries and
// snapshots both go through it.
//
// Pure functions, safe for concurrent use; an error never panics.
package boundedmsgpack

import (
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// MaxDepth is the nesting limit Unmarshal applies.
const MaxDepth = 16

// ErrBad is wrapped by every error of Unmarshal.
var ErrBad = errors.New("bad msgpack")

// Unmarshal decodes the msgpack object b into v after Validate(b,
// MaxDepth). Use it for every msgpack header that did not come from this
// process.
func Unmarshal(b []byte, v any) error {
	if err := Validate(b, MaxDepth); err != nil {
		return fmt.Errorf("%w: %v", ErrBad, err)
	}
	if err := msgpack.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %v", ErrBad, err)
	}
	return nil
}

// Validate checks that b holds exactly one well-formed msgpack object
// in which every declared length fits in the bytes that remain (an array of
// n elements needs at least n more bytes, a map 2n) and nesting is at most
// maxDepth. After it passes, decoding b allocates at most a small multiple of
// len(b) per element type, whatever the declared lengths claimed.
func Validate(b []byte, maxDepth int) error {
	// pending[i] counts the objects still to read at nesting level i.
	pending := make([]uint64, 1, 8)
	pending[0] = 1
	p := 0
	need := func(n uint64) error {
		if n > uint64(len(b)-p) {
			return fmt.Errorf("msgpack length %d at offset %d exceeds the %d bytes left", n, p, len(b)-p)
		}
		return nil
	}
	readN := func(n int) (uint64, error) {
		if err := need(uint64(n)); err != nil {
			return 0, err
		}
		var v uint64
		for _, c := range b[p : p+n] {
			v = v<<8 | uint64(c)
		}
		p += n
		return v, nil
	}
	for len(pending) > 0 {
		top := len(pending) - 1
		if pending[top] == 0 {
			pending = pending[:top]
			continue
		}
		pending[top]--
		if p >= len(b) {
			return fmt.Errorf("msgpack truncated at offset %d", p)
		}
		c := b[p]
		p++
		var skip, children uint64
		var err error
		switch {
		case c <= 0x7f, c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3:
		case c >= 0x80 && c <= 0x8f:
			children = 2 * uint64(c&0x0f)
		case c >= 0x90 && c <= 0x9f:
			children = uint64(c & 0x0f)
		case c >= 0xa0 && c <= 0xbf:
			skip = uint64(c & 0x1f)
		case c == 0xc4, c == 0xd9: // bin8, str8
			skip, err = readN(1)
		case c == 0xc5, c == 0xda: // bin16, str16
			skip, err = readN(2)
		case c == 0xc6, c == 0xdb: // bin32, str32
			skip, err = readN(4)
		case c == 0xc7, c == 0xc8, c == 0xc9: // ext8/16/32: length, then type byte
			skip, err = readN(1 << (c - 0xc7))
			skip++
		case c == 0xca, c == 0xce, c == 0xd2:
			skip = 4
		case c == 0xcb, c == 0xcf, c == 0xd3:
			skip = 8
		case c == 0xcc, c == 0xd0:
			skip = 1
		case c == 0xcd, c == 0xd1:
			skip = 2
		case c >= 0xd4 && c <= 0xd8: // fixext 1/2/4/8/16, plus type byte
			skip = 1 + 1<<(c-0xd4)
		case c == 0xdc:
			children, err = readN(2)
		case c == 0xdd:
			children, err = readN(4)
		case c == 0xde, c == 0xdf:
			children, err = readN(2 << (c - 0xde))
			children *= 2
		default: // 0xc1 is never used
			return fmt.Errorf("msgpack byte 0x%02x at offset %d is not a valid type", c, p-1)
		}
		if err != nil {
			return err
		}
		if err := need(skip); err != nil {
			return err
		}
		p += int(skip)
		if children > 0 {
			if err := need(children); err != nil {
				return err
			}
			if len(pending) >= maxDepth {
				return fmt.Errorf("msgpack nesting deeper than %d", maxDepth)
			}
			pending = append(pending, children)
		}
	}
	if p != len(b) {
		return fmt.Errorf("%d bytes after the msgpack object", len(b)-p)
	}
	return nil
}
