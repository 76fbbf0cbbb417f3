package cudaops

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// FormatError reports a data file that cannot be used: wrong magic,
// truncated, inconsistent with its companion file.
type FormatError struct {
	File   string // path, or a description of the source
	Reason string
}

func (e *FormatError) Error() string { return fmt.Sprintf("cudaops: %s: %s", e.File, e.Reason) }

// IDX is a decoded IDX file of unsigned bytes (the only element type MNIST
// uses).
//
// File layout (all integers big-endian):
//
//	offset 0  uint16  0
//	offset 2  uint8   element type, 0x08 = unsigned byte
//	offset 3  uint8   number of dimensions d (1..4)
//	offset 4  uint32  size of each dimension, d times
//	then      prod(sizes) elements, row-major, and nothing after them
type IDX struct {
	Dims []int
	Data []byte
}

// maxIDXElements bounds what ReadIDX accepts (MNIST's training images are
// 47M), so a forged header cannot make it allocate gigabytes.
const maxIDXElements = 1 << 28

// maxIDXPrealloc is the most ReadIDX allocates on the header's word alone.
const maxIDXPrealloc = 64 << 20

var errIDXTruncated = errors.New("truncated")

// ReadIDX decodes an IDX stream. Errors describe the problem without a file
// name; ReadIDXFile adds it.
func ReadIDX(r io.Reader) (*IDX, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, fmt.Errorf("header: %w", truncated(err))
	}
	if hdr[0] != 0 || hdr[1] != 0 {
		return nil, fmt.Errorf("wrong magic %#02x%02x%02x%02x: not an IDX file", hdr[0], hdr[1], hdr[2], hdr[3])
	}
	if hdr[2] != 0x08 {
		return nil, fmt.Errorf("element type %#02x not supported (want 0x08, unsigned byte)", hdr[2])
	}
	nd := int(hdr[3])
	if nd < 1 || nd > 4 {
		return nil, fmt.Errorf("%d dimensions, want 1 to 4", nd)
	}
	raw := make([]byte, 4*nd)
	if _, err := io.ReadFull(r, raw); err != nil {
		return nil, fmt.Errorf("dimensions: %w", truncated(err))
	}
	dims := make([]int, nd)
	total := 1
	for i := range dims {
		dims[i] = int(binary.BigEndian.Uint32(raw[4*i:]))
		if dims[i] == 0 {
			return nil, fmt.Errorf("dimension %d is zero", i)
		}
		if dims[i] > maxIDXElements || total*dims[i] > maxIDXElements {
			return nil, fmt.Errorf("dimensions %v exceed %d elements", dims[:i+1], maxIDXElements)
		}
		total *= dims[i]
	}
	// The buffer is sized from the header up to maxIDXPrealloc, so MNIST's
	// 47 MB are read into one allocation of their size (io.ReadAll's
	// doubling would hold up to twice that while loading); beyond it, it
	// grows as data arrives, so a header promising more than the stream
	// holds costs at most maxIDXPrealloc more than the stream holds.
	buf := bytes.NewBuffer(make([]byte, 0, min(total, maxIDXPrealloc)+bytes.MinRead))
	if _, err := buf.ReadFrom(io.LimitReader(r, int64(total)+1)); err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	data := buf.Bytes()
	switch {
	case len(data) < total:
		return nil, fmt.Errorf("data %w: %d of %d bytes for dimensions %v", errIDXTruncated, len(data), total, dims)
	case len(data) > total:
		return nil, fmt.Errorf("trailing bytes after %d elements for dimensions %v", total, dims)
	}
	return &IDX{Dims: dims, Data: data}, nil
}

func truncated(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errIDXTruncated
	}
	return err
}

// ReadIDXFile reads an IDX file, gunzipping it when it starts with the gzip
// magic. Every error is a *FormatError naming path, or an *os.PathError.
func ReadIDXFile(path string) (*IDX, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := maybeGunzip(f)
	if err != nil {
		return nil, &FormatError{File: path, Reason: err.Error()}
	}
	idx, err := ReadIDX(r)
	if err != nil {
		return nil, &FormatError{File: path, Reason: err.Error()}
	}
	return idx, nil
}

// maybeGunzip returns a reader of the decompressed stream when r starts
// with the gzip magic, else of r itself. A gzip stream cut short surfaces as
// a read error from the returned reader.
func maybeGunzip(r io.Reader) (io.Reader, error) {
	br := bufio.NewReader(r)
	magic, _ := br.Peek(2)
	if !bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		return br, nil
	}
	zr, err := gzip.NewReader(br)
	if err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	return zr, nil
}
