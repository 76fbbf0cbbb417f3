package shardapi

import (
	"bytes"
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
