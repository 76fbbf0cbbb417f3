package mesh

import (
	"errors"
	"testing"
)

func TestMetaRoundTrip(t *testing.T) {
	m := Meta{ID: "node-1", QUICAddr: "10.0.0.1:7000", Trains: true, Backend: "cuda", Proto: ProtocolVersion, Leaving: true, Joining: true}
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 64 {
		t.Fatalf("meta takes %d bytes", len(b))
	}
	got, err := DecodeMeta(b)
	if err != nil || got != m {
		t.Fatalf("got %+v %v", got, err)
	}
	for _, bad := range [][]byte{nil, {1}, b[:len(b)-1], append(b, 0), {2, 0, 1, 0, 0, 0, 0}, {1, 0, 1, 0, 0, 0, 0}, make([]byte, 600)} {
		if _, err := DecodeMeta(bad); !errors.Is(err, ErrBadMeta) {
			t.Errorf("DecodeMeta(%v) = %v", bad, err)
		}
	}
}

func TestNodeIDValidate(t *testing.T) {
	for _, ok := range []NodeID{"a", "node-1", "gpu_3.rack2"} {
		if err := ok.Validate(); err != nil {
			t.Error(err)
		}
	}
	for _, bad := range []NodeID{"", "a b", "é", NodeID(make([]byte, 65))} {
		if err := bad.Validate(); !errors.Is(err, ErrBadNodeID) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func FuzzDecodeMeta(f *testing.F) {
	good, _ := Meta{ID: "node-1", QUICAddr: "127.0.0.1:1", Trains: true, Backend: "cpu", Proto: 1}.Encode()
	f.Add(good)
	f.Add([]byte{1, 0, 1, 0, 255})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMeta(b)
		if err != nil {
			return
		}
		again, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if m2, err := DecodeMeta(again); err != nil || m2 != m {
			t.Fatalf("re-decode %+v %v", m2, err)
		}
	})
}

func FuzzDecodePreamble(f *testing.F) {
	for _, ch := range []Channel{{KindRPC, 0}, {KindRaft, 7}} {
		b := encodePreamble(ch)
		f.Add(b[:])
	}
	f.Add([]byte{1, 9, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		ch, err := decodePreamble(b)
		if err != nil {
			return
		}
		if again := encodePreamble(ch); string(again[:]) != string(b) {
			t.Fatalf("%v re-encodes to %v", b, again)
		}
	})
}

// TestPlacedIDsLeaveJoinersOut: a member still joining (it has not
// adopted the job's spec) is live but not placed.
func TestPlacedIDsLeaveJoinersOut(t *testing.T) {
	ms := []Member{{Meta: Meta{ID: "a"}}, {Meta: Meta{ID: "b", Joining: true}}, {Meta: Meta{ID: "c"}}}
	if got := PlacedIDs(ms); len(got) != 2 || got[0] != "a" || got[1] != "c" {
		t.Fatalf("PlacedIDs = %v, want [a c]", got)
	}
	if got := LiveIDs(ms); len(got) != 3 {
		t.Fatalf("LiveIDs = %v, want all three", got)
	}
}
