package boundedmsgpack

import (
	"errors"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func TestUnmarshal(t *testing.T) {
	type hdr struct {
		Items []int `msgpack:"i"`
	}
	good, err := msgpack.Marshal(hdr{Items: []int{1, 2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	var h hdr
	if err := Unmarshal(good, &h); err != nil || len(h.Items) != 3 {
		t.Fatalf("good header: %v, %+v", err, h)
	}
	// An array32 claiming 2^32-1 elements in a 5-byte input.
	if err := Unmarshal([]byte{0xdd, 0xff, 0xff, 0xff, 0xff}, &h.Items); !errors.Is(err, ErrBad) {
		t.Fatalf("oversized array: err = %v, want ErrBad", err)
	}
}

func TestValidateAcceptsRealEncodings(t *testing.T) {
	vals := []any{
		nil, true, 1, -1, 300, -300, 70000, int64(-1) << 40, uint64(1) << 63, 1.5, float32(2.5),
		"", "short", string(make([]byte, 300)), string(make([]byte, 70000)), []byte{1, 2}, make([]byte, 70000),
		[]int{1, 2, 3}, make([]int, 20), make([]int, 70000), map[string]int{"a": 1}, map[string]any{"x": []any{1, "y", map[string]int{}}},
		struct {
			Type string   `msgpack:"type"`
			Tags []string `msgpack:"tags"`
		}{Type: "push", Tags: []string{"a", "b"}}, msgpack.RawMessage{0xd4, 1, 2}, // fixext1
	}
	for _, v := range vals {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := Validate(b, 16); err != nil {
			t.Errorf("%T %v: %v", v, b[:min(len(b), 8)], err)
		}
	}
}
