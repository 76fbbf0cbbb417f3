package trust

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"dsspmesh/internal/testlogger"
	"dsspmesh/mesh"
	"dsspmesh/node/datadir"
	"dsspmesh/node/records"
	"dsspmesh/shardapi"
)

func pub(t *testing.T) ed25519.PublicKey {
	k, err := mesh.GenerateNodeKey()
	if err != nil {
		t.Fatal(err)
	}
	return k.Public().(ed25519.PublicKey)
}

// TestLegacyIDPinnedOnFirstUse: a legacy id is pinned to the first key it
// presents, another key for it is then refused; the replicated pin wins
// over the node's own first sight; conflicting pins refuse the id; a
// self-certifying id passes (the mesh checked its key); a revoked id is
// refused whatever its form; and a restart from the recorded state keeps
// every verdict.
func TestLegacyIDPinnedOnFirstUse(t *testing.T) {
	log := testlogger.New(t, slog.LevelWarn)
	selfKey := pub(t)
	b := newIdentities("node-00000001", selfKey, datadir.Identities{}, log)
	if err := b.check("node-00000001", pub(t)); err == nil {
		t.Fatal("another key accepted for this node's own legacy id")
	}
	k1, k2 := pub(t), pub(t)
	if err := b.check("node-0a1b2c3d", k1); err != nil {
		t.Fatalf("first sight: %v", err)
	}
	if err := b.check("node-0a1b2c3d", k1); err != nil {
		t.Fatalf("same key again: %v", err)
	}
	if err := b.check("node-0a1b2c3d", k2); err == nil || !strings.Contains(err.Error(), "pinned to another key") {
		t.Fatalf("a minted certificate for a pinned legacy id: %v", err)
	}
	if got := b.toReplicate(); len(got) != 2 || !got["node-0a1b2c3d"].Equal(k1) || !got["node-00000001"].Equal(selfKey) {
		t.Fatalf("pins to replicate: %v", got)
	}
	// A certificate of an earlier build (no lifelong key): accepted
	// unpinned, but refused for an id pinned already.
	if err := b.check("node-33333333", nil); err != nil {
		t.Fatalf("an earlier build's certificate: %v", err)
	}
	if err := b.check("node-0a1b2c3d", nil); err == nil {
		t.Fatal("an earlier build's certificate accepted for a pinned id")
	}
	derived := mesh.DeriveID(k2)
	if err := b.check(derived, k2); err != nil {
		t.Fatalf("self-certifying id: %v", err)
	}
	// The shards pinned k2 for another legacy id first: the mesh's pin wins.
	k3 := pub(t)
	if err := b.check("node-11111111", k3); err != nil {
		t.Fatal(err)
	}
	revoked, repinned := b.merge(shardapi.Identities{Revoked: []mesh.NodeID{derived},
		Pins: map[mesh.NodeID]ed25519.PublicKey{"node-11111111": k2, "node-0a1b2c3d": k1}}, []mesh.NodeID{"node-22222222"})
	if len(revoked) != 1 || revoked[0] != derived || len(repinned) != 2 {
		t.Fatalf("merge: newly revoked %v, repinned %v", revoked, repinned)
	}
	if err := b.check("node-11111111", k3); err == nil {
		t.Fatal("the key this node saw first still accepted against the mesh's pin")
	}
	if err := b.check("node-11111111", k2); err != nil {
		t.Fatalf("the mesh's pin: %v", err)
	}
	if err := b.check("node-22222222", k2); err == nil {
		t.Fatal("an id pinned to two keys accepted")
	}
	if err := b.check(derived, k2); err == nil || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("revoked self-certifying id: %v", err)
	}
	if got := b.toReplicate(); len(got) != 1 || got["node-00000001"] == nil {
		t.Fatalf("pins still to replicate after the shards hold them: %v", got)
	}
	rec, changed := b.record()
	if !changed {
		t.Fatal("nothing to record")
	}
	if _, again := b.record(); again {
		t.Fatal("recorded twice")
	}
	// A restart: the recorded state alone refuses the same.
	r := newIdentities("node-00000001", selfKey, rec, log)
	if err := r.check(derived, k2); err == nil {
		t.Fatal("revocation lost across a restart")
	}
	if err := r.check("node-0a1b2c3d", k2); err == nil {
		t.Fatal("pin lost across a restart")
	}
	if err := r.admit(derived); err == nil {
		t.Fatal("memberlist admits a revoked node")
	}
	if ids, pinned, _ := r.status(); len(ids) != 1 || pinned != 3 {
		t.Fatalf("status: revoked %v, %d pinned", ids, pinned)
	}
}

// TestRevocationsPassOnThroughViews: a revocation a peer's view passes on
// is taken only with the operator's MAC (a node that joined after it and
// hosts no replica learns it so); one without is refused, and refused
// again without a new log line.
func TestRevocationsPassOnThroughViews(t *testing.T) {
	key := mesh.MeshKey{9}
	verify := func(op, arg string, mac []byte) bool { return hmac.Equal(key.OperatorMAC(op, arg), mac) }
	var told string
	tr, err := New(Deps{Self: "node-self", Store: &memStore{}, Verify: verify, Event: func(records.Event) {}, Logger: testlogger.New(t, slog.LevelError),
		OnSelfRevoked: func(why string) { told = why }})
	if err != nil {
		t.Fatal(err)
	}
	view := func(rs ...records.Revocation) []byte { // node/status.PeerView's JSON
		b, err := json.Marshal(map[string]any{"revocations": rs})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tr.TakeFromView("node-peer", view(records.Revocation{ID: "node-bad", MAC: []byte("forged")}))
	if tr.ids.isRevoked("node-bad") || !tr.ids.refusedBefore("node-bad", []byte("forged")) {
		t.Fatal("a revocation without the operator's MAC was taken, or not remembered as refused")
	}
	mac := key.OperatorMAC(RevokeOp, "node-bad")
	tr.TakeFromView("node-peer", view(records.Revocation{ID: "node-bad", MAC: mac}, records.Revocation{ID: "node-self", MAC: key.OperatorMAC(RevokeOp, "node-self")}))
	if !tr.ids.isRevoked("node-bad") || tr.ids.isRevoked("node-self") {
		t.Fatal("the operator's revocation not taken, or this node refuses itself")
	}
	if !strings.Contains(told, "node-peer's mesh view") || !strings.Contains(tr.SelfRevoked(), "revoked this node") {
		t.Fatalf("this node, revoked in a peer's view, was told %q (status %q)", told, tr.SelfRevoked())
	}
	if got := tr.ids.revocations(); !hmac.Equal(got["node-bad"], mac) {
		t.Fatalf("the revocation is not passed on with its MAC: %v", got)
	}
	rec, _ := tr.ids.record()
	if !hmac.Equal(rec.MACs["node-bad"], mac) {
		t.Fatal("the MAC is not recorded for a restart")
	}
}

// memStore is a data dir's identities record in memory.
type memStore struct{ rec datadir.Identities }

func (m *memStore) Identities() (datadir.Identities, error)  { return m.rec, nil }
func (m *memStore) SetIdentities(r datadir.Identities) error { m.rec = r; return nil }

// TestRevocationsBounded: a node keeps at most shardapi.MaxIdentities
// revoked ids, as every shard does; one more is refused, naming the bound,
// and changes nothing; a revocation of an id revoked already still is one.
func TestRevocationsBounded(t *testing.T) {
	b := newIdentities("node-00000001", pub(t), datadir.Identities{}, testlogger.New(t, slog.LevelWarn))
	for i := range shardapi.MaxIdentities {
		if fresh, err := b.revoke(mesh.NodeID(fmt.Sprintf("made-up-%d", i)), []byte("mac")); !fresh || err != nil {
			t.Fatalf("revocation %d: %v %v", i, fresh, err)
		}
	}
	if fresh, err := b.revoke("one-more", []byte("mac")); fresh || err == nil || !strings.Contains(err.Error(), "the most a mesh keeps") {
		t.Fatalf("one revocation beyond the bound: %v %v", fresh, err)
	}
	if b.isRevoked("one-more") {
		t.Fatal("the refused revocation took effect")
	}
	if fresh, err := b.revoke("made-up-7", nil); fresh || err != nil {
		t.Fatalf("a revocation again: %v %v", fresh, err)
	}
}

// TestRefusedRevocationsPacedAndCounted: 3000 unauthenticated POST
// /revoke cost one log line (and one a minute after), each counted.
func TestRefusedRevocationsPacedAndCounted(t *testing.T) {
	var logs bytes.Buffer
	tr, err := New(Deps{Self: "node-self", Store: &memStore{}, Verify: func(string, string, []byte) bool { return false },
		Event: func(records.Event) {}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	h := tr.WithRevoke(http.NotFoundHandler())
	for range 3000 {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest("POST", "/revoke?id=node-x", nil)
		r.Header.Set("Authorization", "DSSP-Operator 00")
		h.ServeHTTP(rec, r)
		if rec.Code != http.StatusForbidden {
			t.Fatalf("an unauthenticated revocation: %d", rec.Code)
		}
	}
	if n := strings.Count(logs.String(), "refused a revocation"); n != 1 || tr.Refused() != 3000 {
		t.Fatalf("3000 refusals: %d log lines, %d counted; want 1 and 3000\n%s", n, tr.Refused(), logs.String())
	}
}
