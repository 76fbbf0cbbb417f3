package mesh

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"github.com/vmihailenco/msgpack/v5"

	"dsspmesh/internal/boundedmsgpack"
)

// Frame layout on an RPC stream (integers big-endian):
//
//	0   u32  H: header length,  1 ≤ H ≤ FrameLimits.MaxHeader
//	4   u32  P: payload length, 0 ≤ P ≤ FrameLimits.MaxPayload
//	8   H bytes: one msgpack object, the header
//	8+H P bytes: raw payload (tensors as little-endian float32)
//
// Both lengths are checked before anything is allocated. The header is
// validated by boundedmsgpack.Validate before msgpack decodes it, and the payload
// buffer grows as bytes actually arrive, so a peer that announces a large
// frame and sends nothing costs at most payloadChunk bytes — except on a
// stream whose receiver bounded its payloads itself (Stream.SetMaxPayload:
// a shard, at its gradient's size), where the payload is allocated whole
// at once, at most that bound: growing a 3 MB push by doubling allocated
// twice its size in buffers thrown away, a garbage collector's worth of
// work on every push a leader takes.

const framePrefixSize = 8

// payloadChunk bounds how far the payload buffer runs ahead of the bytes
// received.
const payloadChunk = 1 << 20

// FrameLimits bounds what a peer may make us allocate for one frame.
type FrameLimits struct {
	MaxHeader  int // bytes of msgpack header; default 64 KiB
	MaxPayload int // bytes of raw payload; default 256 MiB
	MaxDepth   int // msgpack nesting depth of the header; default 16

	// whole: MaxPayload is the receiver's own bound (limitPayload), so a
	// payload is allocated whole.
	whole bool
}

// DefaultFrameLimits returns the limits used when none are configured.
func DefaultFrameLimits() FrameLimits {
	return FrameLimits{MaxHeader: 64 << 10, MaxPayload: 256 << 20, MaxDepth: 16}
}

// Validate reports a limit that is out of range.
func (l FrameLimits) Validate() error {
	if l.MaxHeader < 16 || l.MaxHeader > 16<<20 {
		return fmt.Errorf("mesh: FrameLimits.MaxHeader %d must be in [16, 16 MiB]", l.MaxHeader)
	}
	if l.MaxPayload < 0 || int64(l.MaxPayload) > math.MaxUint32 {
		return fmt.Errorf("mesh: FrameLimits.MaxPayload %d must be in [0, 4 GiB)", l.MaxPayload)
	}
	if l.MaxDepth < 1 || l.MaxDepth > 64 {
		return fmt.Errorf("mesh: FrameLimits.MaxDepth %d must be in [1, 64]", l.MaxDepth)
	}
	return nil
}

// appendFramePrefix encodes header and returns prefix+header, to be followed
// on the wire by payload.
func appendFramePrefix(dst []byte, header any, payloadLen int, lim FrameLimits) ([]byte, error) {
	h, err := msgpack.Marshal(header)
	if err != nil {
		return nil, fmt.Errorf("mesh: encode frame header: %w", err)
	}
	if len(h) > lim.MaxHeader {
		return nil, fmt.Errorf("mesh: frame header is %d bytes, limit %d", len(h), lim.MaxHeader)
	}
	if payloadLen > lim.MaxPayload {
		return nil, fmt.Errorf("mesh: frame payload is %d bytes, limit %d", payloadLen, lim.MaxPayload)
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(h)))
	dst = binary.BigEndian.AppendUint32(dst, uint32(payloadLen))
	return append(dst, h...), nil
}

// readFrame reads one frame from r, decodes its header into header and
// returns the payload, which the caller owns. Any error other than a clean
// io.EOF before the first byte is a *FrameError or an I/O error.
func readFrame(r io.Reader, header any, lim FrameLimits) ([]byte, error) {
	pl, err := readHeader(r, header, lim)
	if err != nil {
		return nil, err
	}
	payload, err := readPayload(r, pl, lim.whole)
	if err != nil {
		return nil, truncated("payload", err)
	}
	return payload, nil
}

// readFrameTo is readFrame handing the payload to take as a reader of
// exactly its bytes (Stream.RecvFrameTo); what take leaves unread is
// discarded, so the next frame starts where it should. A read error of the
// payload, whether take saw it or the discard did, is the error (a
// *FrameError for a truncation); else take's.
func readFrameTo(r io.Reader, header any, lim FrameLimits, take func(n int, r io.Reader) error) error {
	pl, err := readHeader(r, header, lim)
	if err != nil {
		return err
	}
	pr := &payloadReader{r: r, left: pl}
	var terr error
	if take != nil {
		terr = take(pl, pr)
	}
	if pr.err == nil && pr.left > 0 {
		io.Copy(io.Discard, pr)
	}
	if pr.err != nil {
		return truncated("payload", pr.err)
	}
	return terr
}

// payloadReader reads the left bytes of a frame's payload from r and
// keeps the first error.
type payloadReader struct {
	r    io.Reader
	left int
	err  error
}

func (p *payloadReader) Read(b []byte) (int, error) {
	if p.err != nil {
		return 0, p.err
	}
	if p.left == 0 {
		return 0, io.EOF
	}
	n, err := p.r.Read(b[:min(len(b), p.left)])
	p.left -= n
	if err == io.EOF && p.left > 0 {
		err = io.ErrUnexpectedEOF
	}
	if err != nil && err != io.EOF {
		p.err = err
	}
	return n, err
}

// readHeader reads a frame's length prefix and header, decodes the header
// into header and returns the payload's length.
func readHeader(r io.Reader, header any, lim FrameLimits) (int, error) {
	var pre [framePrefixSize]byte
	if n, err := io.ReadFull(r, pre[:]); err != nil {
		if n > 0 && err == io.ErrUnexpectedEOF {
			return 0, &FrameError{Reason: "truncated length prefix"}
		}
		return 0, err
	}
	hl := binary.BigEndian.Uint32(pre[0:4])
	pl := binary.BigEndian.Uint32(pre[4:8])
	if hl == 0 || uint64(hl) > uint64(lim.MaxHeader) {
		return 0, &FrameError{Reason: fmt.Sprintf("header length %d outside [1, %d]", hl, lim.MaxHeader)}
	}
	if uint64(pl) > uint64(lim.MaxPayload) {
		return 0, &FrameError{Reason: fmt.Sprintf("payload length %d exceeds limit %d", pl, lim.MaxPayload)}
	}
	hb := make([]byte, hl)
	if _, err := io.ReadFull(r, hb); err != nil {
		return 0, truncated("header", err)
	}
	if err := boundedmsgpack.Validate(hb, lim.MaxDepth); err != nil {
		return 0, &FrameError{Reason: "header: " + err.Error()}
	}
	if err := msgpack.Unmarshal(hb, header); err != nil {
		return 0, &FrameError{Reason: "header: " + err.Error()}
	}
	return int(pl), nil
}

// limitPayload is lim with MaxPayload lowered to n when 0 < n < it.
func limitPayload(lim FrameLimits, n int) FrameLimits {
	if n > 0 && n < lim.MaxPayload {
		lim.MaxPayload, lim.whole = n, true
	}
	return lim
}

func truncated(part string, err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return &FrameError{Reason: "truncated " + part}
	}
	return err
}

func readPayload(r io.Reader, n int, whole bool) ([]byte, error) {
	if n <= payloadChunk || whole {
		b := make([]byte, n)
		_, err := io.ReadFull(r, b)
		return b, err
	}
	b := make([]byte, 0, payloadChunk)
	for len(b) < n {
		step := min(n-len(b), max(payloadChunk, len(b)))
		b = append(b, make([]byte, step)...)
		if _, err := io.ReadFull(r, b[len(b)-step:]); err != nil {
			return nil, err
		}
	}
	return b, nil
}
