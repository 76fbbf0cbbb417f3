package mesh

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// pushHeader is shaped like the shard layer's push request.
type pushHeader struct {
	Type    string   `msgpack:"t"`
	Worker  string   `msgpack:"w"`
	Iter    uint64   `msgpack:"i"`
	Samples uint32   `msgpack:"n"`
	Tags    []string `msgpack:"g"`
}

func encodeFrame(t testing.TB, h any, payload []byte) []byte {
	t.Helper()
	b, err := appendFramePrefix(nil, h, len(payload), DefaultFrameLimits())
	if err != nil {
		t.Fatal(err)
	}
	return append(b, payload...)
}

func rawFrame(header []byte, payloadLen uint32, payload []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(header)))
	b = binary.BigEndian.AppendUint32(b, payloadLen)
	b = append(b, header...)
	return append(b, payload...)
}

func TestFrameRoundTrip(t *testing.T) {
	want := pushHeader{Type: "push", Worker: "n1", Iter: 7, Samples: 32, Tags: []string{"a"}}
	payload := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9}
	var buf bytes.Buffer
	buf.Write(encodeFrame(t, want, payload))
	buf.Write(encodeFrame(t, want, nil))
	var got pushHeader
	p, err := readFrame(&buf, &got, DefaultFrameLimits())
	if err != nil {
		t.Fatal(err)
	}
	if got.Worker != want.Worker || got.Iter != want.Iter || len(got.Tags) != 1 {
		t.Fatalf("header %+v, want %+v", got, want)
	}
	if !bytes.Equal(p, payload) {
		t.Fatalf("payload %v, want %v", p, payload)
	}
	if p, err := readFrame(&buf, &got, DefaultFrameLimits()); err != nil || len(p) != 0 {
		t.Fatalf("empty payload frame: %v %v", p, err)
	}
	if _, err := readFrame(&buf, &got, DefaultFrameLimits()); err != io.EOF {
		t.Fatalf("after last frame: %v, want io.EOF", err)
	}
}

// malformedFrames are inputs a hostile or broken peer might send; each must
// be refused with a *FrameError.
func malformedFrames(t testing.TB) map[string][]byte {
	good := encodeFrame(t, pushHeader{Type: "push", Worker: "n1"}, []byte{1, 2, 3, 4})
	return map[string][]byte{
		"truncated prefix":       good[:5],
		"truncated header":       good[:10],
		"truncated payload":      good[:len(good)-1],
		"zero header length":     rawFrame(nil, 0, nil),
		"header length too big":  binary.BigEndian.AppendUint32([]byte{0xff, 0xff, 0xff, 0xff}, 0),
		"payload length too big": rawFrame([]byte{0x80}, 0xffffffff, nil),
		"msgpack array32 4G":     rawFrame([]byte{0xdd, 0xff, 0xff, 0xff, 0xff}, 0, nil),
		"msgpack map32 4G":       rawFrame([]byte{0xdf, 0xff, 0xff, 0xff, 0xff}, 0, nil),
		"msgpack str32 4G":       rawFrame([]byte{0xdb, 0xff, 0xff, 0xff, 0xff}, 0, nil),
		"msgpack bin32 4G":       rawFrame([]byte{0xc6, 0xff, 0xff, 0xff, 0xff}, 0, nil),
		"msgpack ext32 4G":       rawFrame([]byte{0xc9, 0xff, 0xff, 0xff, 0xff, 0x01}, 0, nil),
		"msgpack invalid byte":   rawFrame([]byte{0xc1}, 0, nil),
		"msgpack trailing bytes": rawFrame([]byte{0x80, 0x80}, 0, nil),
		"msgpack too deep":       rawFrame(bytes.Repeat([]byte{0x91}, 100), 0, nil),
		"wrong type for struct":  rawFrame(mustMarshal(t, []int{1, 2, 3}), 0, nil),
		"wrong field type":       rawFrame(mustMarshal(t, map[string]any{"i": "seven", "s": "seven"}), 0, nil),
		"tags as 4G array":       rawFrame([]byte{0x81, 0xa1, 'g', 0xdd, 0xff, 0xff, 0xff, 0xff}, 0, nil),
	}
}

func mustMarshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestReadFrameRefusesMalformedWithBoundedMemory(t *testing.T) {
	lim := DefaultFrameLimits()
	for name, in := range malformedFrames(t) {
		t.Run(name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			var h pushHeader
			_, err := readFrame(bytes.NewReader(in), &h, lim)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, ErrBadFrame) {
				t.Fatalf("err = %v, want ErrBadFrame", err)
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 4<<20 {
				t.Fatalf("allocated %d bytes for a %d-byte input", grew, len(in))
			}
		})
	}
}

func TestReadPayloadGrowsWithData(t *testing.T) {
	// A peer announcing the maximum payload and sending 10 bytes costs one
	// chunk, not MaxPayload.
	in := rawFrame([]byte{0x80}, 200<<20, make([]byte, 10))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var h map[string]any
	_, err := readFrame(bytes.NewReader(in), &h, DefaultFrameLimits())
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrBadFrame) {
		t.Fatalf("err = %v", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 4<<20 {
		t.Fatalf("allocated %d bytes", grew)
	}
	// Under a receiver's own bound the payload is allocated whole, once:
	// 3 MB in, about 3 MB allocated (growing by doubling took twice that).
	const n = 3 << 20
	in = encodeFrame(t, map[string]any{"op": 1}, make([]byte, n))
	runtime.ReadMemStats(&before)
	p, err := readFrame(bytes.NewReader(in), &h, limitPayload(DefaultFrameLimits(), n))
	runtime.ReadMemStats(&after)
	if err != nil || len(p) != n {
		t.Fatalf("bounded stream: %d bytes, %v", len(p), err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > n+n/4 {
		t.Fatalf("bounded stream: allocated %d bytes for a payload of %d", grew, n)
	}
}

func TestFrameLimitsValidate(t *testing.T) {
	if err := DefaultFrameLimits().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := DefaultFrameLimits()
	bad.MaxHeader = 1
	if err := bad.Validate(); err == nil {
		t.Fatal("MaxHeader 1 accepted")
	}
}

func FuzzReadFrame(f *testing.F) {
	f.Add(encodeFrame(f, pushHeader{Type: "push", Worker: "n1", Iter: 3, Tags: []string{"x"}}, []byte{0, 0, 128, 63}))
	f.Add(encodeFrame(f, map[string]any{"t": "ok", "p": []float64{1}}, nil))
	for _, in := range malformedFrames(f) {
		f.Add(in)
	}
	lim := FrameLimits{MaxHeader: 4096, MaxPayload: 1 << 16, MaxDepth: 8}
	f.Fuzz(func(t *testing.T, in []byte) {
		var h pushHeader
		readFrame(bytes.NewReader(in), &h, lim)
		var any map[string]any
		readFrame(bytes.NewReader(in), &any, lim)
	})
}

// TestReadFrameTo: take reads a payload from the stream itself; what it
// leaves unread is skipped, so the next frame decodes; its own error is
// returned; a truncated payload is a *FrameError whatever take did.
func TestReadFrameTo(t *testing.T) {
	payload := bytes.Repeat([]byte{1, 2, 3, 4, 5}, 1000)
	h := pushHeader{Type: "push", Worker: "w", Iter: 3}
	stream := append(encodeFrame(t, h, payload), encodeFrame(t, h, []byte{9})...)
	r := bytes.NewReader(stream)
	var got pushHeader
	var head []byte
	if err := readFrameTo(r, &got, DefaultFrameLimits(), func(n int, pr io.Reader) error {
		if n != len(payload) || got.Iter != 3 {
			t.Fatalf("take called with %d bytes, header %+v", n, got)
		}
		head = make([]byte, 7)
		_, err := io.ReadFull(pr, head)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(head, payload[:7]) {
		t.Fatalf("read % x, want % x", head, payload[:7])
	}
	stop := errors.New("not mine")
	if err := readFrameTo(r, &got, DefaultFrameLimits(), func(n int, pr io.Reader) error { return stop }); err != stop {
		t.Fatalf("second frame: %v, want take's error", err)
	}
	if r.Len() != 0 {
		t.Fatalf("%d bytes left after two frames", r.Len())
	}
	cut := encodeFrame(t, h, payload)
	var fe *FrameError
	err := readFrameTo(bytes.NewReader(cut[:len(cut)-10]), &got, DefaultFrameLimits(), func(n int, pr io.Reader) error {
		_, err := io.Copy(io.Discard, pr)
		return err
	})
	if !errors.As(err, &fe) {
		t.Fatalf("truncated payload: %v, want a *FrameError", err)
	}
	if err := readFrameTo(bytes.NewReader(cut[:len(cut)-10]), &got, DefaultFrameLimits(), nil); !errors.As(err, &fe) {
		t.Fatalf("truncated payload left to the discard: %v, want a *FrameError", err)
	}
}
