package shard

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"testing"
	"time"

	"dsspmesh/mesh"
	"dsspmesh/shardapi"
)

// TestNaNPushRefusedAndParamsFiniteOnEveryReplica: the leader refuses a
// NaN push and a push whose step would overflow; an entry carrying NaN that
// reaches the log anyway (written by hand, as a leader of a broken build
// would) is refused by every replica's FSM alike. Afterwards every replica
// holds the same, finite parameters.
func TestNaNPushRefusedAndParamsFiniteOnEveryReplica(t *testing.T) {
	const n = 16
	c := newCluster(t, 5)
	ids := nodeIDs(3)
	spec := shardapi.Spec{Shard: 5, Len: n, Policy: "ssp:2", Optimizer: shardapi.Optimizer{Kind: shardapi.SGD, Schedule: shardapi.Schedule{LR: 1e30, Gamma: 1}}}
	c.boot(ids, spec, make([]float32, n))
	cl := c.client("w1", ids)
	if _, err := cl.AddWorker(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	wantReject := func(err error, want shardapi.Reason) {
		t.Helper()
		var rej *shardapi.RejectError
		if !errors.As(err, &rej) || rej.Reason != want {
			t.Fatalf("got %v, want a %s rejection", err, want)
		}
		t.Logf("refused as expected: %v", err)
	}
	nan := make([]float32, n)
	nan[3] = float32(math.NaN())
	_, err := cl.Push(context.Background(), shardapi.Push{Iter: 0, Samples: 8, ComputeNs: 1, Payload: cl.Encode(nan, 8)})
	wantReject(err, shardapi.ReasonNonFinite)
	// Finite, but 1e30 × 1e10 overflows float32.
	huge := make([]float32, n)
	huge[7] = 1e10
	_, err = cl.Push(context.Background(), shardapi.Push{Iter: 0, Samples: 8, ComputeNs: 1, Payload: cl.Encode(huge, 8)})
	wantReject(err, shardapi.ReasonNonFiniteStep)

	// Straight into the log: every FSM refuses it.
	leader := c.waitLeader("")
	data, err := encodePushes([]Push{{PushMeta: meta("w1", 0, 8), Grad: gradBytes(nan)}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := leader.propose(context.Background(), data)
	if err != nil {
		t.Fatal(err)
	}
	wantReject(a.Pushes[0].Err, shardapi.ReasonNonFinite)

	good := make([]float32, n)
	good[0] = 1e-31
	p, err := cl.Push(context.Background(), shardapi.Push{Iter: 0, Samples: 8, ComputeNs: 1, Payload: cl.Encode(good, 8)})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(float64(p.Params[0])+0.1) > 1e-6 {
		t.Fatalf("parameter 0 after a good push: %v", p.Params[0])
	}
	c.waitSame()
	for id, r := range c.live() {
		if i := firstNonFinite(r.FSM().Params(nil)); i >= 0 {
			t.Errorf("%s: parameter %d is not finite", id, i)
		}
		st := r.FSM().Status()
		if st.Rejected["non-finite"] != 1 || st.Rejected["non-finite-step"] != 1 || st.Pushes != 1 {
			t.Errorf("%s: rejected %v, pushes %d; want one of each refusal in the FSM and one push", id, st.Rejected, st.Pushes)
		}
	}
	if r := leader.Status().Service.Refused["w1"]; r.NonFinite != 1 || r.Streak != 0 {
		t.Errorf("leader's refusals for w1: %+v", r)
	}
}

// TestPushAsAnotherPeerRefused: a peer authenticated as "mallory" may not
// push, join or leave under the id of "w1"; w1 itself may.
func TestPushAsAnotherPeerRefused(t *testing.T) {
	const n = 4
	c := newCluster(t, 6)
	ids := nodeIDs(3)
	spec := testSpec(n, "ssp:2")
	spec.Shard = 6
	c.boot(ids, spec, make([]float32, n))
	honest := c.client("w1", ids)
	if _, err := honest.AddWorker(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	tr, err := c.net.NewTransport("mallory", "mallory-addr", mesh.DefaultFrameLimits())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	cfg := shardapi.DefaultClientConfig(6, "w1", func() []mesh.NodeID { return ids })
	forger, err := shardapi.NewClient(cfg, tr, c.resolve, c.logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { forger.Close() })
	for name, call := range map[string]func() error{
		"push": func() error {
			_, err := forger.Push(context.Background(), shardapi.Push{Iter: 0, Samples: 1, ComputeNs: 1, Payload: forger.Encode(make([]float32, n), 1)})
			return err
		},
		"add-worker":    func() error { _, err := forger.AddWorker(context.Background(), 0); return err },
		"remove-worker": func() error { return forger.RemoveWorker(context.Background()) },
	} {
		err := call()
		var rej *shardapi.RejectError
		if !errors.As(err, &rej) || rej.Reason != shardapi.ReasonNotPeer {
			t.Fatalf("%s as w1 from mallory: got %v, want a not-the-peer rejection", name, err)
		}
		t.Logf("%s refused: %v", name, err)
	}
	st := c.waitLeader("").FSM().Status()
	if len(st.Workers) != 1 || st.Workers[0].ID != "w1" || st.Pushes != 0 {
		t.Fatalf("forged requests changed the shard: %+v", st)
	}
	if _, err := honest.Push(context.Background(), shardapi.Push{Iter: 0, Samples: 1, ComputeNs: 1, Payload: honest.Encode(make([]float32, n), 1)}); err != nil {
		t.Fatalf("w1's own push: %v", err)
	}
}

// countingReader is an endless stream of zeros that counts what it gave.
type countingReader struct{ n int64 }

func (r *countingReader) Read(b []byte) (int, error) {
	clear(b)
	r.n += int64(len(b))
	return len(b), nil
}

// TestRestoreRefusesOverlongSnapshot: a snapshot followed by more bytes
// than its header describes, or whose header claims an absurd length, is
// refused having read at most the valid snapshot plus one byte — never
// the rest of an endless reader.
func TestRestoreRefusesOverlongSnapshot(t *testing.T) {
	h := newFSMHarness(t, testSpec(1024, "ssp:1"), make([]float32, 1024))
	valid := snapshotBytes(t, h.f)
	endless := &countingReader{}
	f := NewFSM(1, nil)
	err := f.Restore(nopCloser{io.MultiReader(bytes.NewReader(valid), endless)})
	if !errors.Is(err, shardapi.ErrBadSnapshot) {
		t.Fatalf("over-long snapshot: got %v, want ErrBadSnapshot", err)
	}
	if endless.n > snapshotChunk {
		t.Fatalf("read %d bytes past a %d-byte snapshot", endless.n, len(valid))
	}
	t.Logf("refused after reading %d bytes past the valid %d: %v", endless.n, len(valid), err)
	if f.Status().Initialized {
		t.Fatal("a refused snapshot changed the state")
	}

	// A header length beyond any valid snapshot's: refused after the prefix.
	lie := append([]byte(nil), valid[:len(snapshotMagic)+1]...)
	lie = append(lie, 0xff, 0xff, 0xff, 0xff)
	endless = &countingReader{}
	err = f.Restore(nopCloser{io.MultiReader(bytes.NewReader(lie), endless)})
	if !errors.Is(err, shardapi.ErrBadSnapshot) || endless.n != 0 {
		t.Fatalf("lying header: got %v after %d more bytes", err, endless.n)
	}
	t.Logf("lying header refused: %v", err)

	// The valid snapshot alone restores.
	if err := f.Restore(nopCloser{bytes.NewReader(valid)}); err != nil {
		t.Fatal(err)
	}
	if f.StateHash() != h.f.StateHash() {
		t.Fatal("restored state differs")
	}
}

// TestHygieneRefusesOutliersAndCountsStreaks: with a factor of 10, a
// gradient 100× the median norm is refused once the window has its first
// pushes; three in a row make a repeat offender; an accepted push resets
// the streak.
func TestHygieneRefusesOutliersAndCountsStreaks(t *testing.T) {
	h := newHygiene()
	spec := testSpec(8, "asp")
	spec.OutlierFactor = 10
	grad := func(scale float32) []byte {
		v := make([]float32, 8)
		for i := range v {
			v[i] = scale * float32(i+1)
		}
		return gradBytes(v)
	}
	for i := range minNormSamples {
		if r, d := h.check("a", spec, grad(1+float32(i%3)/10), 1, nil); r != 0 {
			t.Fatalf("push %d refused: %s %s", i, r, d)
		}
	}
	for range shardapi.RepeatOffender {
		if r, d := h.check("b", spec, grad(100), 1, nil); r != shardapi.ReasonOutlier {
			t.Fatalf("outlier: got %s %q", r, d)
		}
	}
	if got := h.stats()["b"]; got.Outliers != shardapi.RepeatOffender || got.Streak != shardapi.RepeatOffender {
		t.Fatalf("b: %+v", got)
	}
	if r, _ := h.check("b", spec, grad(1), 1, nil); r != 0 {
		t.Fatal("a push at the median refused")
	}
	if got := h.stats()["b"]; got.Streak != 0 {
		t.Fatalf("b: %+v", got)
	}
	// A push of no samples is a fetch: zeros pass, anything else is refused.
	if r, _ := h.check("z", spec, grad(0), 0, nil); r != 0 {
		t.Fatal("a zero push of no samples refused")
	}
	if r, _ := h.check("z", spec, grad(1), 0, nil); r != shardapi.ReasonOutOfBounds {
		t.Fatalf("a gradient on a push of no samples: %s", r)
	}
	nan := make([]float32, 8)
	nan[2] = float32(math.Inf(1))
	if r, _ := h.check("c", spec, gradBytes(nan), 1, nil); r != shardapi.ReasonNonFinite {
		t.Fatal("Inf accepted")
	}
	if got := h.stats()["c"]; got.NonFinite != 1 || got.Streak != 1 {
		t.Fatalf("c: %+v", got)
	}
}

// TestIdleWorkerStreamClosed: a stream that sends nothing is closed by the
// replica after IdleStreamTimeout; one whose push is held stays open.
func TestIdleWorkerStreamClosed(t *testing.T) {
	c := newCluster(t, 8)
	c.cfg = func(id mesh.NodeID) Config {
		cfg := fastConfig(8, id)
		cfg.IdleStreamTimeout = 200 * time.Millisecond
		return cfg
	}
	ids := nodeIDs(1)
	spec := testSpec(4, "ssp:1")
	spec.Shard = 8
	c.boot(ids, spec, make([]float32, 4))
	tr, err := c.net.NewTransport("idle", "idle-addr", mesh.DefaultFrameLimits())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	s, err := tr.Dial(context.Background(), ids[0], string(ids[0]), mesh.Channel{Kind: mesh.KindRPC, Shard: 8})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s.SetReadDeadline(start.Add(10 * time.Second))
	var rep shardapi.Reply
	if _, err := s.RecvFrame(&rep); err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("idle stream: %v after %v", err, time.Since(start))
	}
	t.Logf("idle stream closed after %v", time.Since(start).Round(time.Millisecond))

	// Under SSP(1) w1's second push is held while w2 has not pushed: its
	// stream outlives the idle timeout on the keep-alives.
	w1, w2 := c.client("w1", ids), c.client("w2", ids)
	for _, cl := range []*shardapi.Client{w1, w2} {
		if _, err := cl.AddWorker(context.Background(), 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w1.Push(context.Background(), shardapi.Push{Iter: 0, Samples: 1, ComputeNs: 1, Payload: w1.Encode(make([]float32, 4), 1)}); err != nil {
		t.Fatal(err)
	}
	done := make(chan shardapi.PushReply, 1)
	go func() {
		rep, err := w1.Push(context.Background(), shardapi.Push{Iter: 1, Samples: 1, ComputeNs: 1, Payload: w1.Encode(make([]float32, 4), 1)})
		if err != nil {
			t.Error(err)
		}
		done <- rep
	}()
	c.waitFor(5*time.Second, "w1's push held", func() bool { return c.replica(ids[0]).Status().Held == 1 })
	held := time.Now()
	c.waitFor(5*time.Second, "three idle timeouts", func() bool { return time.Since(held) > 600*time.Millisecond })
	if _, err := w2.Push(context.Background(), shardapi.Push{Iter: 0, Samples: 1, ComputeNs: 1, Payload: w2.Encode(make([]float32, 4), 1)}); err != nil {
		t.Fatal(err)
	}
	if r := (<-done).Retries; r != 0 {
		t.Fatalf("w1's held push needed %d retries: its stream was closed", r)
	}
}
