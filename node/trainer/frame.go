package trainer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// DefaultMaxFrame bounds a trainer's message: its JSON, without tensors,
// is a few hundred bytes, a hello with a large layout tens of KiB.
const DefaultMaxFrame = 1 << 20

// ErrFrameTooLarge is a frame whose length exceeds the limit.
var ErrFrameTooLarge = errors.New("trainer: frame too large")

// WriteFrame writes body as one frame: its length as 4 bytes little
// endian, then body. scratch (may be nil) is reused to send both in one
// write; the grown buffer is returned for the next call.
func WriteFrame(w io.Writer, scratch, body []byte) ([]byte, error) {
	scratch = binary.LittleEndian.AppendUint32(scratch[:0], uint32(len(body)))
	scratch = append(scratch, body...)
	_, err := w.Write(scratch)
	return scratch, err
}

// ReadFrame reads one frame from r into buf (grown when too small) and
// returns its body. A length over max is ErrFrameTooLarge, read no
// further; an EOF before the length is io.EOF, within the frame
// io.ErrUnexpectedEOF.
func ReadFrame(r io.Reader, buf []byte, max int) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint32(hdr[:])
	if uint64(n) > uint64(max) {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, max)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf, nil
}
