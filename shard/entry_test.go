package shard

import (
	"testing"

	"dsspmesh/clock"
)

// A push entry written by the build before PushMeta was embedded (its
// header keys in another order) decodes to the same pushes.
func TestDecodePreviousPushEntry(t *testing.T) {
	type oldHeader struct {
		Worker    clock.WorkerID `msgpack:"w"`
		Iter      int64          `msgpack:"i"`
		RecvNanos int64          `msgpack:"t"`
		Samples   int64          `msgpack:"s"`
		ComputeNs int64          `msgpack:"c"`
		Bytes     int            `msgpack:"n"`
	}
	type oldBatch struct {
		Pushes []oldHeader `msgpack:"p"`
	}
	g := gradBytes([]float32{1, 2})
	b, err := appendEntry(entryPush, oldBatch{Pushes: []oldHeader{{Worker: "a", Iter: 3, RecvNanos: 9, Samples: 8, ComputeNs: 5, Bytes: len(g)}}}, len(g))
	if err != nil {
		t.Fatal(err)
	}
	e, err := decodeEntry(append(b, g...))
	if err != nil {
		t.Fatal(err)
	}
	want := Push{PushMeta: meta("a", 3, 8), RecvNanos: 9}
	want.ComputeNs = 5
	if len(e.pushes) != 1 || e.pushes[0].PushMeta != want.PushMeta || e.pushes[0].RecvNanos != 9 || string(e.pushes[0].Grad) != string(g) {
		t.Errorf("decoded %+v, want %+v with the gradient", e.pushes, want)
	}
}
