package shard

import (
	"bytes"
	"testing"

	"github.com/hashicorp/raft"

	"dsspmesh/clock"
	"dsspmesh/shardapi"
)

// A raft log entry or a snapshot can arrive from another replica, so both
// decoders must refuse anything malformed without panicking or allocating
// far beyond the input. The seeds are real encodings plus the msgpack
// header that makes a naive decoder reserve ~34 GiB.

func FuzzDecodeEntry(f *testing.F) {
	seed := func(b []byte, err error) {
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	seed(encodeInit(testSpec(3, "dssp:3:12"), []float32{1, 2, 3}))
	seed(encodePushes([]Push{
		{PushMeta: shardapi.PushMeta{PushID: shardapi.PushID{Worker: "a", Iter: 4}, Samples: 64, ComputeNs: 7}, RecvNanos: 99, Grad: gradBytes([]float32{1, 2, 3})},
		{PushMeta: meta("b", 2, 0), Grad: gradBytes([]float32{4, 5, 6})},
	}))
	seed(encodeGroup([]Push{{PushMeta: meta("a", 0, 1)}, {PushMeta: meta("b", 0, 1)}}, gradBytes([]float32{1, 2, 3}),
		[]Push{{PushMeta: meta("c", 0, 1), Grad: gradBytes([]float32{4, 5, 6})}}))
	seed(encodeWorker(entryAddWorker, "w-1", 0))
	seed(encodeWorker(entryRemoveWorker, "w-1", 0))
	d := bytes.Repeat([]byte{7}, 32)
	seed(encodeAgree(agreeHeader{Op: "check", At: 1, Servers: []string{"a", "b", "c"}, Voters: 2, Digests: [][]byte{d, d, nil}, Own: []string{"c"}}))
	seed(encodeAgree(agreeHeader{Op: "evict", At: 1, ID: "c"}))
	f.Add([]byte{byte(entryPush), 0, 0, 0, 7, 0x81, 0xa1, 'p', 0xdd, 0xff, 0xff, 0xff})
	f.Add([]byte{byte(entryPush), 0, 0, 0, 5, 0xdd, 0xff, 0xff, 0xff, 0xff})

	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeEntry(b)
		if err != nil {
			return
		}
		for _, p := range e.Pushes {
			if len(p.Grad) > len(b) {
				t.Fatalf("push gradient of %d bytes from a %d-byte entry", len(p.Grad), len(b))
			}
		}
		// Whatever decodes must apply without panicking.
		fsm := NewFSM(1, nil)
		fsm.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: b})
	})
}

func FuzzRestore(f *testing.F) {
	h := newFSMHarness(f, testSpec(4, "dssp:1:3"), []float32{1, 2, 3, 4})
	for _, w := range []clock.WorkerID{"a", "b"} {
		h.apply(encodeWorker(entryAddWorker, w, 0))
	}
	h.apply(encodePushes([]Push{{PushMeta: meta("a", 0, 2), RecvNanos: 10, Grad: gradBytes([]float32{1, 1, 1, 1})}}))
	f.Add(snapshotBytes(f, h.f))
	f.Add(append([]byte("dsspshrd\x01\x00\x00\x00\x05"), 0xdd, 0xff, 0xff, 0xff, 0xff))

	f.Fuzz(func(t *testing.T, b []byte) {
		fsm := NewFSM(1, nil)
		before := fsm.StateHash()
		if err := fsm.Restore(nopCloser{bytes.NewReader(b)}); err != nil && fsm.StateHash() != before {
			t.Fatal("a refused snapshot changed the state")
		}
	})
}
