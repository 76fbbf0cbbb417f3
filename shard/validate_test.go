package shard

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"dsspmesh/clock"
	"dsspmesh/mesh"
	"dsspmesh/shardapi"
)

// validationCases are the rules of checkPush and the non-finite check,
// each as a push of worker "a" at iteration 0 of a shard of 4 fp32
// values, and the reason it is refused with.
func validationCases() []struct {
	name string
	m    shardapi.PushMeta
	grad []byte
	want shardapi.Reason
} {
	ok := gradBytes([]float32{1, 2, 3, 4})
	with := func(f func(*shardapi.PushMeta)) shardapi.PushMeta {
		m := meta("a", 0, 1)
		f(&m)
		return m
	}
	return []struct {
		name string
		m    shardapi.PushMeta
		grad []byte
		want shardapi.Reason
	}{
		{"empty worker", with(func(m *shardapi.PushMeta) { m.Worker = "" }), ok, shardapi.ReasonBadRequest},
		{"negative iteration", with(func(m *shardapi.PushMeta) { m.Iter = -1 }), ok, shardapi.ReasonBadRequest},
		{"negative samples", with(func(m *shardapi.PushMeta) { m.Samples = -1 }), ok, shardapi.ReasonBadRequest},
		{"negative compute time", with(func(m *shardapi.PushMeta) { m.ComputeNs = -1 }), ok, shardapi.ReasonBadRequest},
		{"iteration beyond the bound", with(func(m *shardapi.PushMeta) { m.Iter = shardapi.MaxIter + 1 }), ok, shardapi.ReasonOutOfBounds},
		{"samples beyond the job's bound", with(func(m *shardapi.PushMeta) { m.Samples = shardapi.MaxBatch + 1 }), ok, shardapi.ReasonOutOfBounds},
		{"2^62 samples", with(func(m *shardapi.PushMeta) { m.Samples = 1 << 62 }), ok, shardapi.ReasonOutOfBounds},
		{"compute time beyond the bound", with(func(m *shardapi.PushMeta) { m.ComputeNs = shardapi.MaxComputeNs + 1 }), ok, shardapi.ReasonOutOfBounds},
		{"short gradient", meta("a", 0, 1), ok[:12], shardapi.ReasonBadLength},
		{"gradient on a push of no samples", meta("a", 0, 0), ok, shardapi.ReasonOutOfBounds},
		{"non-finite gradient", meta("a", 0, 1), gradBytes([]float32{1, float32(math.NaN()), 3, 4}), shardapi.ReasonNonFinite},
	}
}

func wantReason(t *testing.T, where string, err error, want shardapi.Reason) {
	t.Helper()
	var rej *shardapi.RejectError
	if !errors.As(err, &rej) || rej.Reason != want {
		t.Errorf("%s: %v, want a %s rejection", where, err, want)
	}
}

// TestOneValidationAtServiceAndFSM: every rule of a push is refused with
// the same reason by the leader's service before it proposes the push
// (nothing proposed) and by the FSM, for a push alone and in a summed
// group (where the push breaking it is refused and the others are
// regrouped); nothing changes. At the service an empty worker never names
// the stream's peer, so it is refused as not the peer first.
func TestOneValidationAtServiceAndFSM(t *testing.T) {
	for _, c := range validationCases() {
		h := groupHarness4(t)
		a := h.apply(encodePushes([]Push{{PushMeta: c.m, Grad: c.grad}}))
		wantReason(t, c.name+" at the FSM", a.Pushes[0].Err, c.want)
		if c.want != shardapi.ReasonBadLength && c.want != shardapi.ReasonNonFinite && c.m.Samples != 0 {
			// In a group the gradient is the sum's: the fields are the push's own.
			a = h.apply(encodeGroup([]Push{{PushMeta: c.m}, {PushMeta: meta("b", 0, 1)}}, gradBytes([]float32{1, 1, 1, 1}), nil))
			wantReason(t, c.name+" in a group at the FSM", a.Pushes[0].Err, c.want)
			if !errors.Is(a.Pushes[1].Err, ErrRegroup) {
				t.Errorf("%s: the group's other push: %+v, want ErrRegroup", c.name, a.Pushes[1])
			}
		}
		if st := h.f.Status(); st.Pushes != 0 || st.Min != 0 || st.Max != 0 || firstNonZero(h.f.Params(nil)) >= 0 {
			t.Errorf("%s: a refused push changed the state: %+v", c.name, st)
		}
	}

	cl := newCluster(t, 7)
	ids := cl.bootZeros(1, 4, "asp")
	leader := cl.waitLeader("")
	w := cl.client("a", ids)
	if _, err := w.AddWorker(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	for _, c := range validationCases() {
		want := c.want
		if c.m.Worker == "" {
			want = shardapi.ReasonNotPeer
		}
		var err error
		if c.m.Worker == "" {
			// A client names its own worker: the empty one goes by hand.
			err = rawPush(t, cl, ids[0], c.m, c.grad)
		} else {
			_, err = w.Push(context.Background(), shardapi.Push{Iter: c.m.Iter, Samples: c.m.Samples, ComputeNs: c.m.ComputeNs, Payload: c.grad})
		}
		wantReason(t, c.name+" at the service", err, want)
	}
	st := leader.Status()
	if st.Service.ProposedPushes != 0 || st.Pushes != 0 || len(st.Rejected) != 0 {
		t.Errorf("refused at admission, yet proposed %d pushes, applied %d, the FSM refused %v", st.Service.ProposedPushes, st.Pushes, st.Rejected)
	}
}

// groupHarness4 is an FSM of 4 parameters with workers a and b at clock 0.
func groupHarness4(t *testing.T) *fsmHarness {
	h := newFSMHarness(t, testSpec(4, "asp"), make([]float32, 4))
	for _, w := range []clock.WorkerID{"a", "b"} {
		h.apply(encodeWorker(entryAddWorker, w, 0))
	}
	return h
}

// rawPush sends one push frame of m and grad to replica id from a
// transport of its own, as node m.Worker or "raw" when that is empty, and
// returns the final reply as an error (nil for an OK).
func rawPush(t *testing.T, c *cluster, id mesh.NodeID, m shardapi.PushMeta, grad []byte) error {
	t.Helper()
	from := mesh.NodeID(m.Worker)
	if from == "" {
		from = "raw"
	}
	tr, err := c.net.NewTransport(from, "raw-addr", mesh.DefaultFrameLimits())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	s, err := tr.Dial(context.Background(), id, string(id), mesh.Channel{Kind: mesh.KindRPC, Shard: c.shard})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.SetReadDeadline(time.Now().Add(10 * time.Second))
	if err := s.SendFrame(shardapi.Request{Op: shardapi.OpPush, PushMeta: m}, grad); err != nil {
		t.Fatal(err)
	}
	for {
		var rep shardapi.Reply
		if _, err := s.RecvFrame(&rep); err != nil {
			t.Fatal(err)
		}
		switch rep.Status {
		case shardapi.ReplyHeld, shardapi.ReplyPending:
			continue
		case shardapi.ReplyOK:
			return nil
		case shardapi.ReplyRejected:
			return &shardapi.RejectError{Shard: c.shard, Worker: rep.Worker, Iter: rep.Iter, Reason: rep.Reason, Detail: rep.Detail}
		}
		return fmt.Errorf("reply %+v", rep)
	}
}

func firstNonZero(v []float32) int {
	for i, x := range v {
		if x != 0 {
			return i
		}
	}
	return -1
}
