package shardapi

import (
	"bytes"
	"encoding/hex"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"dsspmesh/clock"
)

// The frames of the build before PushID was embedded: an embedded PushID
// and PushMeta must encode to the same bytes, so mixed builds interoperate.
type oldRequest struct {
	Op        Op             `msgpack:"op"`
	Worker    clock.WorkerID `msgpack:"w"`
	Iter      int64          `msgpack:"i"`
	Samples   int64          `msgpack:"s"`
	ComputeNs int64          `msgpack:"c"`
}

type oldReply struct {
	Op      Op             `msgpack:"op"`
	Worker  clock.WorkerID `msgpack:"w"`
	Iter    int64          `msgpack:"i"`
	Status  ReplyStatus    `msgpack:"st"`
	Leader  string         `msgpack:"l,omitempty"`
	Reason  Reason         `msgpack:"r,omitempty"`
	Detail  string         `msgpack:"d,omitempty"`
	Clock   int64          `msgpack:"c,omitempty"`
	Index   uint64         `msgpack:"x,omitempty"`
	Max     int64          `msgpack:"m,omitempty"`
	Samples int64          `msgpack:"n,omitempty"`
}

func TestWireHeadersUnchanged(t *testing.T) {
	id := PushID{Worker: "node-1", Iter: 42}
	same := func(name string, now, old any) {
		t.Helper()
		a, err := msgpack.Marshal(now)
		if err != nil {
			t.Fatal(err)
		}
		b, err := msgpack.Marshal(old)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s encodes as %x, the previous build as %x", name, a, b)
		}
	}
	same("Request", Request{Op: OpPush, PushMeta: PushMeta{PushID: id, Samples: 64, ComputeNs: 7}},
		oldRequest{Op: OpPush, Worker: "node-1", Iter: 42, Samples: 64, ComputeNs: 7})
	same("Reply", Reply{Op: OpRead, PushID: id, Status: ReplyOK, Leader: "n2", Clock: 3, Max: 5, Samples: 9},
		oldReply{Op: OpRead, Worker: "node-1", Iter: 42, Status: ReplyOK, Leader: "n2", Clock: 3, Max: 5, Samples: 9})

	var back Request
	b, _ := msgpack.Marshal(oldRequest{Op: OpPush, Worker: "w", Iter: 3, Samples: 2, ComputeNs: 1})
	if err := msgpack.Unmarshal(b, &back); err != nil || back.PushID != (PushID{"w", 3}) || back.Samples != 2 || back.ComputeNs != 1 {
		t.Errorf("previous request decoded as %+v, %v", back, err)
	}
}

// Every field of the request and reply headers, pinned to the bytes this
// format has had since Keep, Assign, Ahead and Term were added.
func TestWireHeadersGolden(t *testing.T) {
	req := Request{Op: OpPush, PushMeta: PushMeta{PushID: PushID{"w1", 7}, Samples: 64, ComputeNs: 9}, Keep: true}
	rep := Reply{Op: OpPush, PushID: PushID{"w1", 7}, Status: ReplyOK, Leader: "n2", Reason: ReasonFuture, Detail: "d", Clock: 3, Index: 11, Max: 5, Samples: 9,
		Assign: &Assignment{Iter: 8, Version: 2, Batch: 16, Pos: 100, Global: 64, PredictNs: 5}, Ahead: &Assignment{Iter: 9, Version: 2, Batch: 16, Pos: 164, Global: 64, PredictNs: 5}, Term: 4}
	for _, c := range []struct {
		name string
		v    any
		want string
	}{
		{"Request", req, "86a26f70cc01a177a27731a169d30000000000000007a173d30000000000000040a163d30000000000000009a16bc3"},
		{"Reply", rep, "8ea26f70cc01a177a27731a169d30000000000000007a27374cc01a16ca26e32a172cc04a164a164a163d30000000000000003a178cf000000000000000ba16dd30000000000000005a16ed30000000000000009a16186a169d30000000000000008a176cf0000000000000002a162d30000000000000010a170d30000000000000064a167d30000000000000040a174d30000000000000005a2613286a169d30000000000000009a176cf0000000000000002a162d30000000000000010a170d300000000000000a4a167d30000000000000040a174d30000000000000005a2746dcf0000000000000004"},
	} {
		b, err := msgpack.Marshal(c.v)
		if err != nil {
			t.Fatal(err)
		}
		if got := hex.EncodeToString(b); got != c.want {
			t.Errorf("%s encodes as %s, the format is %s", c.name, got, c.want)
		}
	}
}
