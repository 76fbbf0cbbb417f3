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
	"slices"
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

// TestOnlyPinnedLegacyIDsAccepted: a legacy id pinned nowhere in the
// view (a new member that chose it) is refused in the handshake and in
// gossip, by a message naming it and saying to use a self-certifying id,
// and no pin is made on its first use; an id the data dir's record pins
// (an upgraded mesh's member) is accepted under its key only, not under
// another key nor a certificate of an earlier build; a pin the shards
// replicate is taken (and wins over the record's); conflicting pins
// refuse the id; a self-certifying id passes (the mesh checked its key);
// a revoked id is refused whatever its form; and a restart from the
// recorded state keeps every verdict.
func TestOnlyPinnedLegacyIDsAccepted(t *testing.T) {
	selfKey, k1, k2, k3 := pub(t), pub(t), pub(t), pub(t)
	b := newIdentities("node-00000001", selfKey, datadir.Identities{Pins: map[mesh.NodeID]ed25519.PublicKey{"node-0a1b2c3d": k1}})
	if err := b.check("node-00000001", pub(t)); err == nil {
		t.Fatal("another key accepted for this node's own legacy id")
	}
	for _, key := range []ed25519.PublicKey{k2, nil} {
		err := b.check("0evil", key)
		if err == nil || !strings.Contains(err.Error(), `"0evil"`) || !strings.Contains(err.Error(), "self-certifying id") || !strings.Contains(err.Error(), "--data-dir") {
			t.Fatalf("a fresh legacy id (key %x): %v", key, err)
		}
	}
	if err := b.check("0evil", k2); err == nil {
		t.Fatal("a fresh legacy id was pinned on its first use")
	}
	if err := b.admit("0evil"); err == nil || !strings.Contains(err.Error(), "self-certifying id") {
		t.Fatalf("gossip admits a fresh legacy id: %v", err)
	}
	if err := b.check("node-0a1b2c3d", k1); err != nil {
		t.Fatalf("a legacy id the record pins: %v", err)
	}
	if err := b.admit("node-0a1b2c3d"); err != nil {
		t.Fatalf("gossip refuses a legacy id the record pins: %v", err)
	}
	if err := b.check("node-0a1b2c3d", k2); err == nil || !strings.Contains(err.Error(), "pinned to another key") {
		t.Fatalf("a minted certificate for a pinned legacy id: %v", err)
	}
	if err := b.check("node-0a1b2c3d", nil); err == nil {
		t.Fatal("an earlier build's certificate accepted for a pinned id")
	}
	if got := b.toReplicate(); len(got) != 1 || !got["node-00000001"].Equal(selfKey) {
		t.Fatalf("pins to replicate: %v, want this node's own only", got)
	}
	derived := mesh.DeriveID(k2)
	if err := b.check(derived, k2); err != nil {
		t.Fatalf("self-certifying id: %v", err)
	}
	if err := b.admit(derived); err != nil {
		t.Fatalf("gossip refuses a self-certifying id: %v", err)
	}
	// The shards pin node-11111111 (another member's first sight under an
	// earlier build) and k3 for the record's node-0a1b2c3d: the mesh's
	// pins win.
	if err := b.check("node-11111111", k2); err == nil {
		t.Fatal("a legacy id pinned nowhere yet accepted")
	}
	revoked, repinned := b.merge(shardapi.Identities{Revoked: []mesh.NodeID{derived},
		Pins: map[mesh.NodeID]ed25519.PublicKey{"node-11111111": k2, "node-0a1b2c3d": k3, "node-00000001": selfKey}}, []mesh.NodeID{"node-22222222"})
	if len(revoked) != 1 || revoked[0] != derived || len(repinned) != 2 {
		t.Fatalf("merge: newly revoked %v, repinned %v", revoked, repinned)
	}
	if err := b.check("node-11111111", k2); err != nil {
		t.Fatalf("the mesh's pin: %v", err)
	}
	if err := b.check("node-0a1b2c3d", k1); err == nil {
		t.Fatal("the record's key still accepted against the mesh's pin")
	}
	if err := b.check("node-22222222", k2); err == nil {
		t.Fatal("an id pinned to two keys accepted")
	}
	if err := b.check(derived, k2); err == nil || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("revoked self-certifying id: %v", err)
	}
	if got := b.toReplicate(); len(got) != 0 {
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
	r := newIdentities("node-00000001", selfKey, rec)
	if err := r.check(derived, k2); err == nil {
		t.Fatal("revocation lost across a restart")
	}
	if err := r.check("node-11111111", k2); err != nil {
		t.Fatalf("pin lost across a restart: %v", err)
	}
	if err := r.check("0evil", k2); err == nil {
		t.Fatal("a fresh legacy id accepted after a restart")
	}
	if err := r.admit(derived); err == nil {
		t.Fatal("memberlist admits a revoked node")
	}
	if ids, pinned, _ := r.status(); len(ids) != 1 || pinned != 3 {
		t.Fatalf("status: revoked %v, %d pinned", ids, pinned)
	}
}

// TestFreshLegacyIDRefusedOnTheWire: a node's trust room on the in-memory
// transport and membership refuses a dial from, and to, a fresh legacy id
// (the dialler's error names it and says to use a self-certifying id) and
// leaves it out of the node's members, while a self-certifying member
// dials and is counted.
func TestFreshLegacyIDRefusedOnTheWire(t *testing.T) {
	net, cluster := mesh.NewInmemNetwork(), mesh.NewInmemCluster()
	id := func() mesh.NodeID { return mesh.DeriveID(pub(t)) }
	self, honest := id(), id()
	const evil = mesh.NodeID("0evil")
	transports := map[mesh.NodeID]*mesh.InmemTransport{}
	var members mesh.Membership
	for _, n := range []mesh.NodeID{self, honest, evil} {
		tr, err := net.NewTransport(n, string(n), mesh.DefaultFrameLimits())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		transports[n] = tr
		m, err := cluster.NewMember(mesh.Meta{ID: n, QUICAddr: tr.Addr(), Trains: true}, string(n))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Join(t.Context(), []string{string(self)}); err != nil {
			t.Fatal(err)
		}
		if n == self {
			members = m
		}
	}
	tr, err := New(Deps{Self: self, Store: &memStore{}, Transport: transports[self], Membership: members,
		Event: func(records.Event) {}, Logger: testlogger.New(t, slog.LevelError)})
	if err != nil {
		t.Fatal(err)
	}
	ch := mesh.Channel{Kind: mesh.KindRPC}
	lis, err := transports[self].Listen(ch)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	if _, err := transports[evil].Listen(ch); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	s, err := transports[honest].Dial(ctx, self, string(self), ch)
	if err != nil {
		t.Fatalf("a self-certifying member's dial: %v", err)
	}
	s.Close()
	for _, d := range []struct{ from, to mesh.NodeID }{{evil, self}, {self, evil}} {
		_, err := transports[d.from].Dial(ctx, d.to, string(d.to), ch)
		if err == nil || !strings.Contains(err.Error(), `"0evil"`) || !strings.Contains(err.Error(), "self-certifying id") {
			t.Fatalf("a dial %s → %s: %v, want a refusal naming 0evil", d.from, d.to, err)
		}
	}
	var got []mesh.NodeID
	for _, m := range tr.Members().Members() {
		got = append(got, m.ID)
	}
	if len(got) != 2 || !slices.Contains(got, self) || !slices.Contains(got, honest) {
		t.Fatalf("members %v, want %s and %s without 0evil", got, self, honest)
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
	b := newIdentities("node-00000001", pub(t), datadir.Identities{})
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
