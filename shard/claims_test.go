package shard

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"strings"
	"testing"
	"time"

	"dsspmesh/clock"
	"dsspmesh/shardapi"
)

func digestOf(s string) string { d := sha256.Sum256([]byte(s)); return hex.EncodeToString(d[:]) }

// TestClaimsRecordOnlyTheLeaseHolders: shard 0 records a claim only from
// the worker its evaluation lease names at the entry's index, one digest
// per (By, Seq) — a resend is taken again, another file for a claimed
// sequence or an older sequence refused — keeps the newest MaxClaims, and
// restores them from a snapshot.
func TestClaimsRecordOnlyTheLeaseHolders(t *testing.T) {
	spec := testSpec(2, "asp")
	spec.Shard = 0
	h := newFSMHarness(t, spec, []float32{0, 0})
	for _, w := range []clock.WorkerID{"a", "b"} {
		h.apply(encodeWorker(entryAddWorker, w, 0))
	}
	claim := func(c shardapi.Claim) error { t.Helper(); return h.apply(encodeClaim(c)).Err }
	honest := shardapi.Claim{By: "a", Seq: 64, Iter: 1, Accuracy: 0.9, Loss: 0.3, Samples: 500, Digest: digestOf("model at 64")}
	if err := claim(honest); err == nil || !strings.Contains(err.Error(), "does not hold the evaluation lease") {
		t.Fatalf("a claim before any push (no lease): %v", err)
	}
	if a := h.apply(encodePushes([]Push{{PushMeta: meta("b", 0, 4), Grad: gradBytes([]float32{1, 1})}})); !a.Pushes[0].Applied {
		t.Fatal("b's push not applied")
	}
	if err := claim(honest); err == nil || !strings.Contains(err.Error(), `"b" does`) {
		t.Fatalf("a's claim while b holds the lease: %v", err)
	}
	if a := h.apply(encodePushes([]Push{{PushMeta: meta("a", 0, 4), Grad: gradBytes([]float32{1, 1})}})); !a.Pushes[0].Applied {
		t.Fatal("a's push not applied")
	}
	if err := claim(honest); err != nil {
		t.Fatalf("the holder's claim: %v", err)
	}
	if err := claim(honest); err != nil {
		t.Fatalf("the holder's claim resent: %v", err)
	}
	other := honest
	other.Digest = digestOf("another file")
	if err := claim(other); err == nil || !strings.Contains(err.Error(), "claimed sequence 64 already") {
		t.Fatalf("a second digest for sequence 64: %v", err)
	}
	older := honest
	older.Seq = 10
	if err := claim(older); err == nil {
		t.Fatal("an older sequence recorded after a newer one")
	}
	diverged := shardapi.Claim{By: "a", Seq: 128, Iter: 2, Accuracy: 0.1, Loss: math.NaN(), Digest: digestOf("model at 128")}
	for range 2 { // a NaN loss is its own resend
		if err := claim(diverged); err != nil {
			t.Fatalf("a diverged evaluation's claim: %v", err)
		}
	}
	recs := h.f.Claims()
	if len(recs) != 2 || recs[0].Digest != honest.Digest || recs[0].Index == 0 || recs[1].Seq != 128 {
		t.Fatalf("claims recorded: %+v", recs)
	}
	for i := range shardapi.MaxClaims + 3 {
		c := honest
		c.Seq = uint64(200 + i)
		if err := claim(c); err != nil {
			t.Fatal(err)
		}
	}
	recs = h.f.Claims()
	if len(recs) != shardapi.MaxClaims || recs[len(recs)-1].Seq != uint64(200+shardapi.MaxClaims+2) {
		t.Fatalf("%d claims kept, newest %d", len(recs), recs[len(recs)-1].Seq)
	}
	g := restored(t, snapshotBytes(t, h.f))
	if g.StateHash() != h.f.StateHash() || len(g.Claims()) != shardapi.MaxClaims {
		t.Fatalf("restored: %d claims, hash equal %v", len(g.Claims()), g.StateHash() == h.f.StateHash())
	}
}

// TestClaimsOverTheWire: the lease holder records its claim through any
// replica's client and anyone reads it back from the leader; a claim in
// another member's name is refused by name, as is one sent to a shard
// other than 0.
func TestClaimsOverTheWire(t *testing.T) {
	const n = 4
	c := newCluster(t, 0)
	ids := nodeIDs(3)
	spec := testSpec(n, "asp")
	spec.Shard = 0
	c.boot(ids, spec, make([]float32, n))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ev := c.client("w-ev", ids)
	if _, err := ev.AddWorker(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := ev.Push(ctx, shardapi.Push{Iter: 0, Samples: 1, ComputeNs: 1, Payload: ev.Encode(make([]float32, n), 1)}); err != nil {
		t.Fatal(err)
	}
	cl := shardapi.Claim{By: "w-ev", Seq: 1, Accuracy: 0.5, Loss: 1, Samples: 10, Digest: digestOf("x")}
	if err := ev.Claim(ctx, cl); err != nil {
		t.Fatalf("the holder's claim: %v", err)
	}
	other := c.client("w-other", ids)
	forged := cl
	forged.Seq, forged.Digest = 2, digestOf("forged")
	err := other.Claim(ctx, forged)
	wantRejected(t, err, shardapi.ReasonNotPeer, "a claim in another member's name")
	recs, err := other.Claims(ctx)
	if err != nil || len(recs) != 1 || recs[0].Digest != cl.Digest || recs[0].Index == 0 {
		t.Fatalf("claims read: %+v %v", recs, err)
	}
}
