package shard

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"dsspmesh/clock"
	"dsspmesh/internal/boundedmsgpack"
	"dsspmesh/mesh"
	"dsspmesh/shardapi"
)

func snapshotBytes(t testing.TB, f *FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := snap.Persist(&memSink{Buffer: &buf}); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	return buf.Bytes()
}

func restored(t testing.TB, b []byte) *FSM {
	t.Helper()
	g := NewFSM(1, nil)
	if err := g.Restore(nopCloser{bytes.NewReader(b)}); err != nil {
		t.Fatal(err)
	}
	return g
}

func wantRejected(t testing.TB, err error, reason shardapi.Reason, what string) {
	t.Helper()
	var rej *shardapi.RejectError
	if !errors.As(err, &rej) || rej.Reason != reason {
		t.Fatalf("%s: got %v, want a rejection %s", what, err, reason)
	}
}

// TestRevocationAppliedAndKeptThroughSnapshot: a revoke entry takes the
// node's worker out of the gate (releasing the worker it held back) and
// every later push or add-worker of it is refused, alone or in a summed
// group, on this FSM and on one restored from its snapshot.
func TestRevocationAppliedAndKeptThroughSnapshot(t *testing.T) {
	h := newFSMHarness(t, testSpec(4, "ssp:0"), []float32{1, 2, 3, 4})
	for _, w := range []clock.WorkerID{"a", "b"} {
		if a := h.apply(encodeWorker(entryAddWorker, w, 0)); a.Err != nil {
			t.Fatal(a.Err)
		}
	}
	g := gradBytes([]float32{1, 1, 1, 1})
	// b pushes iteration 0; at staleness 0 the gate holds it until a has.
	if a := h.apply(encodePushes([]Push{{PushMeta: meta("b", 0, 1), Grad: g}})); !a.Pushes[0].Applied {
		t.Fatalf("b's push: %+v", a.Pushes[0])
	}
	a := h.apply(encodeIdentity(identityHeader{Op: "revoke", ID: "a", MAC: []byte("operator's mac")}))
	if a.Kind != "revoke" || a.Worker != "a" || a.Err != nil {
		t.Fatalf("revoke: %+v", a)
	}
	if len(a.Released) != 1 || a.Released[0].Worker != "b" {
		t.Fatalf("revoking the slow worker released %+v, want b", a.Released)
	}
	if _, ok := h.f.st.gate.g.Clock("a"); ok {
		t.Fatal("revoked worker still in the gate")
	}
	if a := h.apply(encodeIdentity(identityHeader{Op: "revoke", ID: "a"})); a.Err != nil {
		t.Fatalf("second revoke: %v", a.Err)
	}
	check := func(f *FSM, what string) {
		t.Helper()
		hh := &fsmHarness{t: t, f: f, index: f.AppliedIndex()}
		a := hh.apply(encodeWorker(entryAddWorker, "a", 0))
		wantRejected(t, a.Err, shardapi.ReasonNotPeer, what+": add-worker of a revoked node")
		a = hh.apply(encodePushes([]Push{{PushMeta: meta("a", 0, 1), Grad: g}}))
		wantRejected(t, a.Pushes[0].Err, shardapi.ReasonNotPeer, what+": push of a revoked node")
		a = hh.apply(encodeGroup([]Push{{PushMeta: meta("a", 0, 1)}}, g, nil))
		wantRejected(t, a.Pushes[0].Err, shardapi.ReasonNotPeer, what+": summed push of a revoked node")
		if !f.IsRevoked("a") || f.IsRevoked("b") || !f.Identities().IsRevoked("a") || string(f.Identities().MACs["a"]) != "operator's mac" {
			t.Fatalf("%s: revoked a %v, b %v", what, f.IsRevoked("a"), f.IsRevoked("b"))
		}
		if a := hh.apply(encodePushes([]Push{{PushMeta: meta("b", 1, 1), Grad: g}})); !a.Pushes[0].Applied {
			t.Fatalf("%s: the other worker's push: %+v", what, a.Pushes[0])
		}
	}
	b := snapshotBytes(t, h.f)
	g2 := restored(t, b)
	if g2.StateHash() != h.f.StateHash() {
		t.Fatal("restored state differs")
	}
	check(h.f, "live")
	check(g2, "restored")
}

// TestRevokeBeforeInitAndIdentityBounds: a revocation applies to a shard
// not yet initialised (and survives its snapshot, which then carries
// state); the tables are bounded.
func TestRevokeBeforeInitAndIdentityBounds(t *testing.T) {
	h := &fsmHarness{t: t, f: NewFSM(1, nil)}
	if a := h.apply(encodeIdentity(identityHeader{Op: "revoke", ID: "x"})); a.Err != nil {
		t.Fatal(a.Err)
	}
	if g := restored(t, snapshotBytes(t, h.f)); !g.IsRevoked("x") {
		t.Fatal("revocation of an uninitialised shard lost in its snapshot")
	}
	for i := 1; i < shardapi.MaxIdentities; i++ {
		if a := h.apply(encodeIdentity(identityHeader{Op: "revoke", ID: fmt.Sprintf("n%d", i)})); a.Err != nil {
			t.Fatal(a.Err)
		}
	}
	a := h.apply(encodeIdentity(identityHeader{Op: "revoke", ID: "one-more"}))
	wantRejected(t, a.Err, shardapi.ReasonBadRequest, "revocation beyond the bound")
	if h.f.IsRevoked("one-more") {
		t.Fatal("revoked beyond the bound")
	}
	if a := h.apply(encodeIdentity(identityHeader{Op: "revoke", ID: "x"})); a.Err != nil {
		t.Fatalf("a revocation already held: %v", a.Err)
	}
}

// TestPinFirstKeyWins: the first key pinned for a legacy id stays; a pin of
// another key is refused on every replica alike; a self-certifying id or a
// malformed entry is never pinned; pins survive a snapshot.
func TestPinFirstKeyWins(t *testing.T) {
	k1, _, _ := ed25519.GenerateKey(nil)
	k2, _, _ := ed25519.GenerateKey(nil)
	h := newFSMHarness(t, testSpec(4, "ssp:1"), make([]float32, 4))
	if a := h.apply(encodeIdentity(identityHeader{Op: "pin", ID: "node-0a1b2c3d", Key: k1})); a.Err != nil || a.Kind != "pin" {
		t.Fatalf("pin: %+v", a)
	}
	if a := h.apply(encodeIdentity(identityHeader{Op: "pin", ID: "node-0a1b2c3d", Key: k1})); a.Err != nil {
		t.Fatalf("same pin again: %v", a.Err)
	}
	a := h.apply(encodeIdentity(identityHeader{Op: "pin", ID: "node-0a1b2c3d", Key: k2}))
	wantRejected(t, a.Err, shardapi.ReasonBadRequest, "pin of another key")
	for name, hd := range map[string]identityHeader{
		"self-certifying": {Op: "pin", ID: string(mesh.DeriveID(k2)), Key: k2},
		"short key":       {Op: "pin", ID: "node-11111111", Key: k2[:8]},
		"bad id":          {Op: "revoke", ID: "a b"},
		"unknown op":      {Op: "trust", ID: "node-11111111"},
	} {
		if a := h.apply(encodeIdentity(hd)); a.Kind != "rejected" || !errors.Is(a.Err, shardapi.ErrBadEntry) {
			t.Fatalf("%s: %+v", name, a)
		}
	}
	g := restored(t, snapshotBytes(t, h.f))
	pins := g.Identities().Pins
	if len(pins) != 1 || !pins["node-0a1b2c3d"].Equal(k1) {
		t.Fatalf("pins after restore: %v", pins)
	}
}

// snapshotHeader is the header of a version-2 snapshot as the builds
// before sub-machines wrote it from one struct (today each section writes
// its keys in this order: state.sections).
type snapshotHeader struct {
	Initialized bool              `msgpack:"init"`
	Spec        shardapi.Spec     `msgpack:"spec"`
	Samples     int64             `msgpack:"samples"`
	Pushes      uint64            `msgpack:"pushes"`
	Duplicates  uint64            `msgpack:"dups"`
	Rejected    []uint64          `msgpack:"rejected"`
	Gate        []byte            `msgpack:"gate"`
	LastIndex   uint64            `msgpack:"index"`
	Balance     *balanceSnapshot  `msgpack:"bal,omitempty"`
	Arrivals    int64             `msgpack:"arr,omitempty"`
	Identities  *identitySnapshot `msgpack:"ids,omitempty"`
}

// TestSnapshotWithoutIdentitiesIsTheEarlierFormat: a shard with no
// revocation and no pin writes exactly the bytes the earlier build wrote
// (so its snapshots and state hashes are unchanged, and the earlier
// build's snapshots restore), and the earlier header decodes here.
func TestSnapshotWithoutIdentitiesIsTheEarlierFormat(t *testing.T) {
	h := newFSMHarness(t, testSpec(4, "ssp:1"), []float32{1, 2, 3, 4})
	h.apply(encodeWorker(entryAddWorker, "a", 0))
	b := snapshotBytes(t, h.f)
	pre := len(snapshotMagic) + 5
	hl := int(b[pre-4])<<24 | int(b[pre-3])<<16 | int(b[pre-2])<<8 | int(b[pre-1])
	var now snapshotHeader
	if err := boundedmsgpack.Unmarshal(b[pre:pre+hl], &now); err != nil {
		t.Fatal(err)
	}
	if now.Identities != nil {
		t.Fatal("an empty identity state was written")
	}
	// The header as builds before revocations wrote it: no identities
	// (snapshotHeader omits them when nil).
	before := snapshotHeader{Initialized: now.Initialized, Spec: now.Spec, Samples: now.Samples, Pushes: now.Pushes,
		Duplicates: now.Duplicates, Rejected: now.Rejected, Gate: now.Gate, LastIndex: now.LastIndex, Balance: now.Balance}
	old, err := msgpack.Marshal(&before)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(old, b[pre:pre+hl]) {
		t.Fatal("the header of a shard without identities differs from the earlier build's")
	}
	if g := restored(t, b); g.StateHash() != h.f.StateHash() || len(g.Identities().Revoked) != 0 {
		t.Fatal("earlier-format snapshot restored differently")
	}
}

// TestRevokeOverTheWireOnEveryReplica: any member's Revoke reaches the
// leader, is applied by every replica, and the revoked worker's next push
// is refused by name while the other worker goes on.
func TestRevokeOverTheWireOnEveryReplica(t *testing.T) {
	const n = 4
	c := newCluster(t, 7)
	ids := nodeIDs(3)
	spec := testSpec(n, "ssp:2")
	spec.Shard = 7
	c.boot(ids, spec, make([]float32, n))
	ctx := context.Background()
	bad, good := c.client("w-bad", ids), c.client("w-good", ids)
	for _, cl := range []*shardapi.Client{bad, good} {
		if _, err := cl.AddWorker(ctx, 0); err != nil {
			t.Fatal(err)
		}
	}
	op := c.client("operator", ids)
	mac := bytes.Repeat([]byte{7}, 32)
	if err := op.Revoke(ctx, "w-bad", mac); err != nil {
		t.Fatal(err)
	}
	c.waitFor(5*time.Second, "every replica applies the revocation, with its MAC", func() bool {
		for _, r := range c.live() {
			if ids := r.Identities(); !ids.IsRevoked("w-bad") || !bytes.Equal(ids.MACs["w-bad"], mac) {
				return false
			}
		}
		return true
	})
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := op.Revoke(short, "w-other", make([]byte, 65)); err == nil {
		t.Fatal("a revocation with an overlong MAC applied")
	}
	for _, r := range c.live() {
		if r.Identities().IsRevoked("w-other") {
			t.Fatal("a revocation with an overlong MAC applied")
		}
	}
	_, err := bad.Push(ctx, shardapi.Push{Iter: 0, Samples: 1, ComputeNs: 1, Payload: bad.Encode(make([]float32, n), 1)})
	wantRejected(t, err, shardapi.ReasonNotPeer, "push of a revoked worker")
	if !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("refusal does not say revoked: %v", err)
	}
	if _, err := good.Push(ctx, shardapi.Push{Iter: 0, Samples: 1, ComputeNs: 1, Payload: good.Encode(make([]float32, n), 1)}); err != nil {
		t.Fatalf("the other worker's push: %v", err)
	}
	st := c.waitLeader("").FSM().Status()
	if len(st.Workers) != 1 || st.Workers[0].ID != "w-good" {
		t.Fatalf("workers after the revocation: %+v", st.Workers)
	}
}
