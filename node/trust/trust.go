package trust

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"dsspmesh/internal/pace"
	"dsspmesh/mesh"
	"dsspmesh/node/datadir"
	"dsspmesh/node/records"
	"dsspmesh/shardapi"
)

// Deps are the trust room's edges, built by the node that runs it.
type Deps struct {
	Self mesh.NodeID
	// Key is the node's own public key (nil without one): a legacy self
	// pins it, so no one else's key is taken for its id.
	Key ed25519.PublicKey
	// Store is the data dir's record of identities (identities.json).
	Store Store
	// Transport's handshakes take the room's check where it can
	// (SetPeerCheck); its connections with a revoked peer are cut where
	// it can (ClosePeer); it carries the shard clients of a revocation.
	Transport mesh.Transport
	// Membership is the gossip view; its alive messages take the room's
	// verdict where it can (SetAdmit). [Trust.Members] is it without
	// revoked nodes.
	Membership mesh.Membership
	// Shards is the shard manager once the job is known; nil before.
	Shards func() Shards
	// Verify checks an operator's MAC (mesh.Security.VerifyOperator); nil
	// refuses every revocation.
	Verify func(op, arg string, mac []byte) bool
	// Relay passes an operator's revocation on to member m (the node's
	// control op "revoke"); m checks the MAC itself.
	Relay func(ctx context.Context, m mesh.Member, id mesh.NodeID, mac []byte) error
	// Event records a revocation in the node's event record.
	Event func(records.Event)
	// OnSelfRevoked, if set, is told once that this node is revoked (why:
	// how it learnt it); it must not block.
	OnSelfRevoked func(why string)
	Logger        *slog.Logger
}

// Store is where the identities persist: the node's data dir.
type Store interface {
	Identities() (datadir.Identities, error)
	SetIdentities(datadir.Identities) error
}

// Shards is what the room asks of the shard manager (node/shards).
type Shards interface {
	// Identities is the replicas' identity state and the legacy ids
	// different shards pinned to different keys.
	Identities() (shardapi.Identities, []mesh.NodeID)
	// PinLeading proposes id's key on the shards this node leads.
	PinLeading(ctx context.Context, id mesh.NodeID, key ed25519.PublicKey) error
	// Shards is the job's shard count; Candidates where to look for a
	// shard's leader.
	Shards() int
	Candidates(shard uint32) []mesh.NodeID
}

// RevokeOp is the operator operation `dssp revoke` authenticates
// (mesh.MeshKey.OperatorMAC(RevokeOp, id)).
const RevokeOp = "revoke"

// Every is how often a node merges its replicas' identity state.
const Every = time.Second

// Trust is a node's identity view and its revocations. Safe for
// concurrent use.
type Trust struct {
	d       Deps
	ids     *identities
	members admittedMembers

	// refusals paces the log line of each unauthenticated request (by
	// route: no key a client chooses); refused counts them all.
	refusals pace.Pacer[string]
	refused  atomic.Uint64
	// selfRevoked says why this node is revoked, once it knows.
	selfOnce    sync.Once
	selfRevoked atomic.Pointer[string]
}

// RefusalLogEvery is how often the refusal of unauthenticated requests on
// one route (POST /revoke, a relayed revocation) is logged again: a flood
// of them costs one line a minute, which says how many it held back.
const RefusalLogEvery = time.Minute

// refuse counts an unauthenticated request on route and logs it, paced.
func (t *Trust) refuse(route string, args ...any) {
	n := t.refused.Add(1)
	if log, held, _ := t.refusals.Note(route, time.Now()); log {
		t.d.Logger.Warn("refused a revocation not authenticated by the mesh key", append(args, "route", route,
			"refused_unlogged", held, "refused_total", n, "logged_every", RefusalLogEvery)...)
	}
}

// Refused counts the revocations refused as not authenticated.
func (t *Trust) Refused() uint64 { return t.refused.Load() }

// SelfRevoked says how this node learnt that the operator revoked it, ""
// while it has not.
func (t *Trust) SelfRevoked() string {
	if p := t.selfRevoked.Load(); p != nil {
		return *p
	}
	return ""
}

// revokedSelf is what a node does when it learns that it is revoked
// itself (an operator's authenticated revocation relayed to it, in a
// peer's view or in its replicas' state): once, one ERROR line, the event
// and Deps.OnSelfRevoked (the node stops and exits saying so).
func (t *Trust) revokedSelf(from string) {
	t.selfOnce.Do(func() {
		why := fmt.Sprintf("the mesh's operator revoked this node (%s): the other members refuse its connections, gossip and pushes", from)
		t.selfRevoked.Store(&why)
		t.d.Logger.Error("this node is revoked: it stops", "how", from)
		t.d.Event(records.Event{Kind: records.EventNodeRevoked, Node: string(t.d.Self), Detail: why})
		if t.d.OnSelfRevoked != nil {
			t.d.OnSelfRevoked(why)
		}
	})
}

// New builds the identity view from the data dir's record, installs it in
// the transport's handshakes and memberlist's alive handling where they
// take it (the QUIC and in-memory transports, memberlist; not the
// in-memory membership), and cuts the connections of the revoked nodes
// accepted before.
func New(d Deps) (*Trust, error) {
	saved, err := d.Store.Identities()
	if err != nil {
		return nil, err
	}
	t := &Trust{d: d, ids: newIdentities(d.Self, d.Key, saved), refusals: pace.Pacer[string]{Every: RefusalLogEvery}}
	t.members = admittedMembers{Membership: d.Membership, ids: t.ids}
	if tr, ok := d.Transport.(interface{ SetPeerCheck(mesh.PeerCheck) }); ok {
		tr.SetPeerCheck(t.ids.check)
	}
	if m, ok := d.Membership.(interface{ SetAdmit(func(mesh.NodeID) error) }); ok {
		m.SetAdmit(t.ids.admit)
	}
	revoked, _, _ := t.ids.status()
	for _, id := range revoked { // connections accepted before the check was in place
		t.cutPeer(mesh.NodeID(id), "revoked")
	}
	return t, nil
}

// Members is the node's membership view without revoked nodes:
// placement, the evaluator, shard candidates and /status never count one,
// even while memberlist still lists it.
func (t *Trust) Members() mesh.Membership { return t.members }

// Run keeps the identity view in step with the replicas here until ctx
// ends.
func (t *Trust) Run(ctx context.Context) {
	tick := time.NewTicker(Every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		t.sync(ctx)
	}
}

// shards is the shard manager, nil before the job is known.
func (t *Trust) shards() Shards {
	if t.d.Shards == nil {
		return nil
	}
	return t.d.Shards()
}

// sync merges the shards' identity state, cuts the connections of newly
// revoked or re-pinned nodes, proposes this node's own pins on the shards
// it leads and persists what changed.
func (t *Trust) sync(ctx context.Context) {
	t.ids.syncMu.Lock()
	defer t.ids.syncMu.Unlock()
	var revoked, repinned []mesh.NodeID
	if sm := t.shards(); sm != nil {
		ids, conflicts := sm.Identities()
		revoked, repinned = t.ids.merge(ids, conflicts)
		for id, key := range t.ids.toReplicate() {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if err := sm.PinLeading(pctx, id, key); err != nil {
				t.d.Logger.Warn("pinning a legacy node id's key", "peer", id, "err", err)
			}
			cancel()
		}
	}
	for _, id := range revoked {
		if id == t.d.Self {
			t.revokedSelf("its shards' replicated state")
			continue
		}
		t.revokedHere(id, "the shards' state")
	}
	for _, id := range repinned {
		t.cutPeer(id, "pinned to another key")
	}
	if rec, changed := t.ids.record(); changed {
		if err := t.d.Store.SetIdentities(rec); err != nil {
			t.ids.markDirty()
			t.d.Logger.Error("recording identities in the data dir", "err", err)
		}
	}
}

// Take revokes id here if mac is the operator's (Deps.Verify): the node
// refuses id from then on and cuts its connections. from names who
// relayed it, for the log.
func (t *Trust) Take(id mesh.NodeID, mac []byte, from string) error {
	if err := id.Validate(); err != nil {
		return err
	}
	if !t.verify(string(id), mac) {
		t.refuse("relay", "peer", id, "from", from)
		return fmt.Errorf("revoke %s: not authenticated by this mesh's key", id)
	}
	if id == t.d.Self {
		t.revokedSelf("relayed by " + from)
		return nil
	}
	fresh, err := t.ids.revoke(id, mac)
	if fresh {
		t.revokedHere(id, from)
	}
	return err
}

func (t *Trust) verify(id string, mac []byte) bool {
	return t.d.Verify != nil && t.d.Verify(RevokeOp, id, mac)
}

// revokedHere is what a node does when it learns that id is revoked (from
// the operator, a peer's relay or view, or its replicas' state, the from
// of the log line): it cuts id's connections and records the event.
func (t *Trust) revokedHere(id mesh.NodeID, from string) {
	t.cutPeer(id, "revoked")
	t.d.Event(records.Event{Kind: records.EventNodeRevoked, Node: string(id),
		Detail: fmt.Sprintf("node %s is revoked: its connections, gossip and pushes are refused", id)})
	t.d.Logger.Warn("node revoked: refusing its connections, gossip and pushes", "peer", id, "from", from)
}

// cutPeer closes the transport's connections with id where it can.
func (t *Trust) cutPeer(id mesh.NodeID, reason string) {
	if tr, ok := t.d.Transport.(interface{ ClosePeer(mesh.NodeID, string) }); ok {
		tr.ClosePeer(id, reason)
	}
}

// Revocations are the revocations this node passes on in its mesh view
// (control op "view"), each with the operator's MAC, sorted by id.
func (t *Trust) Revocations() []records.Revocation {
	var out []records.Revocation
	for id, mac := range t.ids.revocations() {
		out = append(out, records.Revocation{ID: string(id), MAC: mac})
	}
	slices.SortFunc(out, func(a, b records.Revocation) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// TakeFromView takes the revocations a peer's view (the JSON of its
// node/status.PeerView) passes on that this node does not hold yet, each
// only if its MAC is the operator's.
func (t *Trust) TakeFromView(from mesh.NodeID, view []byte) {
	var v struct {
		Revocations []records.Revocation `json:"revocations"`
	}
	if json.Unmarshal(view, &v) != nil {
		return
	}
	for _, r := range v.Revocations {
		id := mesh.NodeID(r.ID)
		if id == t.d.Self {
			if t.verify(r.ID, r.MAC) {
				t.revokedSelf("in " + string(from) + "'s mesh view")
			}
			continue
		}
		if t.ids.isRevoked(id) || t.d.Verify != nil && !t.verify(r.ID, r.MAC) && t.ids.refusedBefore(id, r.MAC) {
			continue
		}
		t.Take(id, r.MAC, string(from))
	}
}

// Status is what /status shows: the revoked ids, the count of legacy ids
// pinned, the conflicting ones.
func (t *Trust) Status() (revoked []string, pinned int, conflicts []string) {
	return t.ids.status()
}
