package mesh

import (
	"errors"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func TestUnmarshalBounded(t *testing.T) {
	type hdr struct {
		Items []int `msgpack:"i"`
	}
	good, err := msgpack.Marshal(hdr{Items: []int{1, 2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	var h hdr
	if err := UnmarshalBounded(good, &h); err != nil || len(h.Items) != 3 {
		t.Fatalf("good header: %v, %+v", err, h)
	}
	// An array32 claiming 2^32-1 elements in a 5-byte input.
	if err := UnmarshalBounded([]byte{0xdd, 0xff, 0xff, 0xff, 0xff}, &h.Items); !errors.Is(err, ErrBadMsgpack) {
		t.Fatalf("oversized array: err = %v, want ErrBadMsgpack", err)
	}
}
