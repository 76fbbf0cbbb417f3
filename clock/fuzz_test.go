package clock

import (
	"bytes"
	"testing"
)

// FuzzUnmarshalBinary: any input either fails cleanly or decodes to a gate
// whose encoding decodes to the same gate.
func FuzzUnmarshalBinary(f *testing.F) {
	g, _ := NewGate(DefaultPolicy())
	for _, w := range []WorkerID{"a", "b", "c"} {
		g.AddWorker(w)
	}
	for i := range int64(6) {
		g.Push("a", i, 10*i)
	}
	seed, _ := g.MarshalBinary()
	f.Add(seed)
	f.Add([]byte("dsspgate\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var h Gate
		if err := h.UnmarshalBinary(data); err != nil {
			return
		}
		enc, _ := h.MarshalBinary()
		var again Gate
		if err := again.UnmarshalBinary(enc); err != nil {
			t.Fatalf("re-decoding our own encoding: %v", err)
		}
		enc2, _ := again.MarshalBinary()
		if !bytes.Equal(enc, enc2) {
			t.Fatal("encoding not stable")
		}
	})
}
