package shard

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"dsspmesh/clock"
	"dsspmesh/raftstore"
	"dsspmesh/shardapi"
)

func testSpec(n int, policy string) shardapi.Spec {
	return shardapi.Spec{Shard: 1, Len: n, Policy: policy, Optimizer: shardapi.DefaultOptimizer()}
}

func gradBytes(v []float32) []byte { return shardapi.FP32.Append(nil, v) }

// encodePushes encodes a push entry of ps, each with its own gradient.
func encodePushes(ps []Push) ([]byte, error) { return encodeGroup(nil, nil, ps) }

// meta is a push's metadata: worker w's iteration iter with samples.
func meta(w clock.WorkerID, iter, samples int64) shardapi.PushMeta {
	return shardapi.PushMeta{PushID: shardapi.PushID{Worker: w, Iter: iter}, Samples: samples}
}

type fsmHarness struct {
	t     testing.TB
	f     *FSM
	index uint64
}

func (h *fsmHarness) apply(data []byte, err error) shardapi.Applied {
	h.t.Helper()
	if err != nil {
		h.t.Fatal(err)
	}
	h.index++
	return h.f.Apply(&raft.Log{Index: h.index, Type: raft.LogCommand, Data: data}).(shardapi.Applied)
}

func newFSMHarness(t testing.TB, spec shardapi.Spec, theta []float32) *fsmHarness {
	h := &fsmHarness{t: t, f: NewFSM(spec.Shard, nil)}
	if a := h.apply(encodeInit(spec, theta)); a.Err != nil {
		t.Fatal(a.Err)
	}
	return h
}

func TestFSMRejectsBadPushesWithoutEffect(t *testing.T) {
	h := newFSMHarness(t, testSpec(4, "ssp:1"), []float32{1, 2, 3, 4})
	if a := h.apply(encodeWorker(entryAddWorker, "a", 0)); a.Err != nil || a.StartClock != 0 {
		t.Fatalf("add: %+v", a)
	}
	before := h.f.StateHash()
	good := gradBytes([]float32{1, 1, 1, 1})
	cases := []struct {
		p    Push
		want shardapi.Reason
	}{
		{Push{PushMeta: meta("a", 0, 0), Grad: gradBytes([]float32{1, 1, 1})}, shardapi.ReasonBadLength},
		{Push{PushMeta: meta("a", 0, 0), Grad: gradBytes([]float32{1, float32(math.NaN()), 1, 1})}, shardapi.ReasonNonFinite},
		{Push{PushMeta: meta("a", 0, 0), Grad: gradBytes([]float32{1, 1, float32(math.Inf(-1)), 1})}, shardapi.ReasonNonFinite},
		{Push{PushMeta: meta("zz", 0, 1), Grad: good}, shardapi.ReasonUnknownWorker},
		{Push{PushMeta: meta("a", 5, 1), Grad: good}, shardapi.ReasonFuture},
		{Push{PushMeta: meta("a", 0, -1), Grad: good}, shardapi.ReasonBadRequest},
	}
	for _, c := range cases {
		a := h.apply(encodePushes([]Push{c.p}))
		var rej *shardapi.RejectError
		if !errors.As(a.Pushes[0].Err, &rej) || rej.Reason != c.want || !errors.Is(a.Pushes[0].Err, shardapi.ErrRejected) {
			t.Fatalf("push %+v: got %v, want %s", c.p.Worker, a.Pushes[0].Err, c.want)
		}
	}
	// The hash covers the rejection counters, so compare the rest by hand.
	st := h.f.Status()
	if st.Pushes != 0 || st.Samples != 0 || st.Workers[0].Clock != 0 {
		t.Fatalf("state changed by rejected pushes: %+v", st)
	}
	if got := h.f.Params(nil); got[0] != 1 || got[3] != 4 {
		t.Fatalf("params changed: %v", got)
	}
	if st.Rejected["non-finite"] != 2 || st.Rejected["bad-length"] != 1 || st.Rejected["future-iteration"] != 1 {
		t.Fatalf("counters %v", st.Rejected)
	}
	if h.f.StateHash() == before {
		t.Fatal("state hash ignores rejection counters")
	}
	// An uninitialised shard rejects too.
	f := NewFSM(2, nil)
	b, _ := encodePushes([]Push{{PushMeta: meta("a", 0, 0), Grad: good}})
	a := f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: b}).(shardapi.Applied)
	if !errors.Is(a.Pushes[0].Err, shardapi.ErrRejected) {
		t.Fatalf("uninitialised: %v", a.Pushes[0].Err)
	}
	// Garbage entries are counted, never panic.
	for _, junk := range [][]byte{nil, {9}, {2, 0, 0, 0, 9, 1}, {2, 0, 0, 0, 1, 0x90, 1, 2}} {
		if a := h.apply(junk, nil); a.Err == nil && a.Kind != "push" {
			t.Fatalf("junk %x accepted: %+v", junk, a)
		}
	}
}

func TestFSMDedupeAndSerialReplay(t *testing.T) {
	h := newFSMHarness(t, testSpec(3, "dssp:1:2"), []float32{0, 0, 0})
	for _, w := range []clock.WorkerID{"a", "b"} {
		h.apply(encodeWorker(entryAddWorker, w, 0))
	}
	p0 := Push{PushMeta: meta("a", 0, 8), RecvNanos: 10, Grad: gradBytes([]float32{1, 2, 3})}
	a := h.apply(encodePushes([]Push{p0}))
	if !a.Pushes[0].Applied || !a.Pushes[0].Outcome.Released {
		t.Fatalf("first push: %+v", a.Pushes[0])
	}
	a = h.apply(encodePushes([]Push{p0}))
	if !a.Pushes[0].Duplicate || a.Pushes[0].Applied {
		t.Fatalf("resend: %+v", a.Pushes[0])
	}
	st := h.f.Status()
	if st.Duplicates != 1 || st.Pushes != 1 || st.Samples != 8 {
		t.Fatalf("status after resend %+v", st)
	}
	// Momentum 0.9, lr 0.01, zero velocity: θ = −0.01·g after one step.
	got := h.f.Params(nil)
	for i, g := range []float32{1, 2, 3} {
		if want := -float32(float32(0.01) * g); got[i] != want {
			t.Fatalf("θ[%d] = %v, want %v", i, got[i], want)
		}
	}
}

func TestFSMSnapshotRestoreIsIdentical(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	h := newFSMHarness(t, testSpec(16, "dssp:2:4"), make([]float32, 16))
	ws := []clock.WorkerID{"a", "b", "c"}
	for _, w := range ws {
		h.apply(encodeWorker(entryAddWorker, w, 0))
	}
	iters := map[clock.WorkerID]int64{}
	now := int64(0)
	for range 200 {
		w := ws[rng.IntN(len(ws))]
		if h.f.st.gate.g.IsWaiting(w) {
			continue
		}
		now += rng.Int64N(1000)
		g := make([]float32, 16)
		for i := range g {
			g[i] = rng.Float32() - 0.5
		}
		a := h.apply(encodePushes([]Push{{PushMeta: meta(w, iters[w], 4), RecvNanos: now, Grad: gradBytes(g)}}))
		if a.Pushes[0].Applied {
			iters[w]++
		}
	}
	g := restored(t, snapshotBytes(t, h.f))
	if g.StateHash() != h.f.StateHash() {
		t.Fatal("restored state differs")
	}
	if err := g.Restore(nopCloser{bytes.NewReader([]byte("dsspshrd\x01\x00\x00\x00\x10junk"))}); err == nil {
		t.Fatal("garbage snapshot accepted")
	}
	if g.StateHash() != h.f.StateHash() {
		t.Fatal("failed restore changed the state")
	}
}

// TestSnapshotSharesTheStateUntilWritten: a snapshot copies no parameter
// when taken. An entry applied before it is written steps a copy, so the
// snapshot still writes the state at its index, byte for byte; once it is
// written, entries step θ in place again.
func TestSnapshotSharesTheStateUntilWritten(t *testing.T) {
	h := newFSMHarness(t, testSpec(8, "ssp:1"), make([]float32, 8))
	h.apply(encodeWorker(entryAddWorker, "a", 0))
	push := func(iter int64) {
		t.Helper()
		a := h.apply(encodePushes([]Push{{PushMeta: meta("a", iter, 4), Grad: gradBytes([]float32{1, 2, 3, 4, 5, 6, 7, 8})}}))
		if !a.Pushes[0].Applied {
			t.Fatalf("push %d not applied: %+v", iter, a.Pushes[0])
		}
	}
	push(0)
	h.f.mu.RLock()
	want, err := h.f.st.encode()
	h.f.mu.RUnlock()
	if err != nil {
		t.Fatal(err)
	}
	theta := &h.f.st.params.theta[0]
	snap, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if &h.f.st.params.theta[0] != theta {
		t.Fatal("taking a snapshot copied θ")
	}
	push(1) // while the snapshot is unwritten: a copy is stepped
	if &h.f.st.params.theta[0] == theta {
		t.Fatal("an entry stepped θ in place under an unwritten snapshot")
	}
	var buf bytes.Buffer
	if err := snap.Persist(&memSink{Buffer: &buf}); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatal("the snapshot wrote a state other than the one at its index")
	}

	snap, err = h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	if err := snap.Persist(&memSink{Buffer: &buf}); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	theta = &h.f.st.params.theta[0]
	push(2)
	if &h.f.st.params.theta[0] != theta {
		t.Fatal("an entry after the snapshot was written copied θ")
	}
}

type memSink struct{ *bytes.Buffer }

func (memSink) ID() string    { return "mem" }
func (memSink) Cancel() error { return nil }
func (memSink) Close() error  { return nil }

type nopCloser struct {
	r interface{ Read([]byte) (int, error) }
}

func (n nopCloser) Read(b []byte) (int, error) { return n.r.Read(b) }
func (nopCloser) Close() error                 { return nil }

// A worker's clock must be the same on every shard: AddWorker with the
// clock it has elsewhere advances it where it is behind (releasing those
// it held back), places a newcomer at no less, and never moves it back.
func TestFSMAddWorkerFromAlignsClock(t *testing.T) {
	h := newFSMHarness(t, testSpec(2, "ssp:1"), []float32{0, 0})
	for _, w := range []clock.WorkerID{"a", "b"} {
		h.apply(encodeWorker(entryAddWorker, w, 0))
	}
	grad := gradBytes([]float32{1, 1})
	for i := range int64(3) { // a: 0, 1 within; 2 held (gap 2 > 1)
		h.apply(encodePushes([]Push{{PushMeta: meta("a", i, 1), Grad: grad}}))
	}
	a := h.apply(encodeWorker(entryAddWorker, "b", 2))
	if a.Err != nil || a.StartClock != 2 || len(a.Released) != 1 || a.Released[0].Worker != "a" {
		t.Fatalf("advance b to 2: %+v, want clock 2 and a released", a)
	}
	if a := h.apply(encodeWorker(entryAddWorker, "b", 1)); a.Err != nil || a.StartClock != 2 || len(a.Released) != 0 {
		t.Fatalf("resent add of b from 1: %+v, want clock 2 unchanged", a)
	}
	if a := h.apply(encodeWorker(entryAddWorker, "c", 7)); a.Err != nil || a.StartClock != 7 {
		t.Fatalf("new worker from 7: %+v, want clock 7", a)
	}
	if a := h.apply(encodeWorker(entryAddWorker, "d", 0)); a.Err != nil || a.StartClock != 2 {
		t.Fatalf("new worker from 0: %+v, want t_min 2", a)
	}
	if _, err := decodeEntry(mustBytes(appendEntry(entryAddWorker, workerHeader{Worker: "e", From: -1}, 0))); err == nil {
		t.Fatal("an AddWorker entry from a negative clock decoded")
	}
}

func mustBytes(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// assignments are w's shares for the iterations after its push iter, as
// the leader's replier reads them (shard 0 under the balance layer).
func (f *FSM) assignments(w clock.WorkerID, iter int64) (next, ahead *shardapi.Assignment) {
	f.read(func(st *state) { next, ahead = st.bal.assignments(w, iter) })
	return next, ahead
}

// TestOlderSnapshotIsRefused: a replica refuses to restore a snapshot that
// ends before its applied index (raft's installSnapshot would move its
// applied index back below entries its own snapshots compacted away:
// docs/reliability.md bug 30), keeps its state, and restores a snapshot at
// or past that index.
func TestOlderSnapshotIsRefused(t *testing.T) {
	h := newFSMHarness(t, testSpec(4, "ssp:1"), []float32{1, 2, 3, 4})
	h.apply(encodeWorker(entryAddWorker, "a", 0))
	old := snapshotBytes(t, h.f)
	h.apply(encodePushes([]Push{{PushMeta: meta("a", 0, 4), Grad: gradBytes([]float32{1, 1, 1, 1})}}))
	now := snapshotBytes(t, h.f)
	before := h.f.StateHash()
	err := h.f.Restore(nopCloser{bytes.NewReader(old)})
	if !errors.Is(err, raftstore.ErrOlderSnapshot) || !strings.Contains(err.Error(), "ends at index 2, this replica applied up to 3") {
		t.Fatalf("older snapshot: %v", err)
	}
	if h.f.StateHash() != before || h.f.AppliedIndex() != 3 {
		t.Fatalf("a refused restore changed the state (applied index %d)", h.f.AppliedIndex())
	}
	if err := h.f.Restore(nopCloser{bytes.NewReader(now)}); err != nil {
		t.Fatalf("a snapshot at the applied index: %v", err)
	}
	if g := restored(t, old); g.AppliedIndex() != 2 {
		t.Fatalf("a fresh replica restored the older snapshot at index %d", g.AppliedIndex())
	}

	// A snapshot whose last command is the replica's own: taken, when raft
	// applied nothing past that command here; refused when it applied
	// entries past it (a barrier, a no-op, a configuration), since the
	// snapshot may end before them.
	raftAt := uint64(3)
	h.f.raftApplied = func() uint64 { return raftAt }
	if err := h.f.Restore(nopCloser{bytes.NewReader(now)}); err != nil {
		t.Fatalf("a snapshot at the last command, raft applied nothing past it: %v", err)
	}
	raftAt = 5
	if err := h.f.Restore(nopCloser{bytes.NewReader(now)}); !errors.Is(err, raftstore.ErrOlderSnapshot) || !strings.Contains(err.Error(), "ends at index 3, this replica applied up to 5") {
		t.Fatalf("a snapshot at the last command, raft applied past it: %v", err)
	}
}
