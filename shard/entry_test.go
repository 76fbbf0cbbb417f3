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
	if len(e.Pushes) != 1 || e.Pushes[0].PushMeta != want.PushMeta || e.Pushes[0].RecvNanos != 9 || string(e.Pushes[0].Grad) != string(g) {
		t.Errorf("decoded %+v, want %+v with the gradient", e.Pushes, want)
	}
}

// The push entry's bytes are a format: raft logs and snapshots on disk
// hold them. This is the layout of the build whose entry header was a
// pushBatchHeader of pushHeaders (keys w, i, s, c, t, n; p, sm, sb), built
// by hand; encodeGroup must write the same bytes.
func TestPushEntryBytesUnchanged(t *testing.T) {
	type header struct {
		Worker    clock.WorkerID `msgpack:"w"`
		Iter      int64          `msgpack:"i"`
		Samples   int64          `msgpack:"s"`
		ComputeNs int64          `msgpack:"c"`
		RecvNanos int64          `msgpack:"t"`
		Bytes     int            `msgpack:"n"`
	}
	type batch struct {
		Pushes   []header `msgpack:"p"`
		Summed   int      `msgpack:"sm,omitempty"`
		SumBytes int      `msgpack:"sb,omitempty"`
	}
	sum, g := []byte{1, 2, 3, 4}, []byte{9, 9}
	group := []Push{{PushMeta: meta("a", 1, 2), RecvNanos: 5}, {PushMeta: meta("b", 3, 4), RecvNanos: 6}}
	group[1].ComputeNs = 77
	rest := []Push{{PushMeta: meta("c", 0, 0), RecvNanos: 7, Grad: g}}
	for _, c := range []struct {
		name        string
		group, rest []Push
		old         batch
		payload     []byte
	}{
		{"one push", nil, rest, batch{Pushes: []header{{Worker: "c", RecvNanos: 7, Bytes: 2}}}, g},
		{"group and push", group, rest, batch{Pushes: []header{
			{Worker: "a", Iter: 1, Samples: 2, RecvNanos: 5},
			{Worker: "b", Iter: 3, Samples: 4, ComputeNs: 77, RecvNanos: 6},
			{Worker: "c", RecvNanos: 7, Bytes: 2}}, Summed: 2, SumBytes: 4}, append(append([]byte(nil), sum...), g...)},
	} {
		var s []byte
		if c.group != nil {
			s = sum
		}
		now, err := encodeGroup(c.group, s, c.rest)
		if err != nil {
			t.Fatal(err)
		}
		old, err := appendEntry(entryPush, c.old, len(c.payload))
		if err != nil {
			t.Fatal(err)
		}
		if old = append(old, c.payload...); string(now) != string(old) {
			t.Errorf("%s: encodes as %x, the format is %x", c.name, now, old)
		}
	}
}
