package node

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"dsspmesh/clock"
	"dsspmesh/mesh"
	"dsspmesh/shardapi"
)

// startIdentities builds the node's identity view from the data dir's
// record, installs it in the transport's handshakes and memberlist's alive
// handling where they take it (the QUIC and in-memory transports,
// memberlist; not the in-memory membership), and filters revoked nodes
// out of n.members.
func (n *Node) startIdentities(d Deps) error {
	saved, err := d.Dir.Identities()
	if err != nil {
		return err
	}
	var key ed25519.PublicKey
	if d.Dir.NodeKey != nil {
		key = d.Dir.NodeKey.Public().(ed25519.PublicKey)
	}
	n.ids = newIdentities(n.id, key, saved, n.log)
	if t, ok := d.Transport.(interface{ SetPeerCheck(mesh.PeerCheck) }); ok {
		t.SetPeerCheck(n.ids.check)
	}
	if m, ok := d.Membership.(interface{ SetAdmit(func(mesh.NodeID) error) }); ok {
		m.SetAdmit(n.ids.admit)
	}
	n.members = admittedMembers{Membership: d.Membership, ids: n.ids}
	revoked, _, _ := n.ids.status()
	for _, id := range revoked { // connections accepted before the check was in place
		n.cutPeer(mesh.NodeID(id), "revoked")
	}
	return nil
}

// identityEvery is how often a node merges its replicas' identity state.
const identityEvery = time.Second

// runIdentities keeps the identity view in step with the replicas here
// until ctx ends.
func (n *Node) runIdentities(ctx context.Context) {
	t := time.NewTicker(identityEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n.syncIdentities(ctx)
	}
}

// syncIdentities merges the shards' identity state, cuts the connections
// of newly revoked or re-pinned nodes, proposes this node's own pins on
// the shards it leads and persists what changed.
func (n *Node) syncIdentities(ctx context.Context) {
	n.ids.syncMu.Lock()
	defer n.ids.syncMu.Unlock()
	n.mu.RLock()
	sm := n.shards
	n.mu.RUnlock()
	var revoked, repinned []mesh.NodeID
	if sm != nil {
		ids, conflicts := sm.Identities()
		revoked, repinned = n.ids.merge(ids, conflicts)
		for id, key := range n.ids.toReplicate() {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if err := sm.PinLeading(pctx, id, key); err != nil {
				n.log.Warn("pinning a legacy node id's key", "peer", id, "err", err)
			}
			cancel()
		}
	}
	for _, id := range revoked {
		n.revokedHere(id, "the shards' state")
	}
	for _, id := range repinned {
		n.cutPeer(id, "pinned to another key")
	}
	if rec, changed := n.ids.record(); changed {
		if err := n.dir.SetIdentities(rec); err != nil {
			n.ids.markDirty()
			n.log.Error("recording identities in the data dir", "err", err)
		}
	}
}

// RevokeResult is what a revocation reached.
type RevokeResult struct {
	ID      string   `json:"revoked"`
	Nodes   int      `json:"nodes"`   // other members that took it from this node
	Members int      `json:"members"` // the other members asked
	Shards  int      `json:"shards"`  // the job's shards
	Done    int      `json:"applied"` // shards whose group applied it
	Errors  []string `json:"errors,omitempty"`
}

// Revoke revokes node id on the operator's authority (mac:
// mesh.MeshKey.OperatorMAC(RevokeOp, id), checked here and by every node
// it reaches): this node refuses id at once and records so in its data
// dir; it relays the revocation to every other member over the control
// channel, so each refuses id at once too (a revoked shard leader loses
// its followers, who elect another); and every shard's group applies it
// (shardapi.Client.Revoke to each shard's leader, retried until ctx ends),
// after which a node that joins later learns it from the replicas it
// hosts. An error names the shards that did not apply it; resending is
// safe (a revocation is idempotent).
func (n *Node) Revoke(ctx context.Context, id mesh.NodeID, mac []byte) (RevokeResult, error) {
	res := RevokeResult{ID: string(id)}
	if id == n.id {
		return res, fmt.Errorf("revoke %s: that is the node asked; ask another node (the others would refuse this one before its shards applied it)", id)
	}
	if err := n.takeRevocation(id, mac, "this node's HTTP API"); err != nil {
		return res, err
	}
	for _, m := range n.members.Members() {
		if m.ID != n.id && m.ID != id {
			res.Members++
		}
	}
	res.Nodes = n.broadcastRevoke(ctx, id, mac)
	n.syncIdentities(ctx)
	n.mu.RLock()
	sm := n.shards
	n.mu.RUnlock()
	if sm == nil {
		return res, fmt.Errorf("revoke %s: refused by %d of %d other members, but this node has no job yet, so no shard replicates it: ask a node that trains", id, res.Nodes, res.Members)
	}
	res.Shards = sm.Shards()
	resolve := mesh.ResolveFromMembership(n.members)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for s := range res.Shards {
		wg.Go(func() {
			shard := uint32(s)
			cfg := shardapi.DefaultClientConfig(shard, clock.WorkerID(n.id), func() []mesh.NodeID { return sm.Candidates(shard) })
			cfg.Alive, cfg.Deadline = n.isMember, 30*time.Second
			err := func() error {
				c, err := shardapi.NewClient(cfg, n.tr, resolve, n.log)
				if err != nil {
					return err
				}
				defer c.Close()
				return c.Revoke(ctx, id, mac)
			}()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				res.Errors = append(res.Errors, fmt.Sprintf("shard %d: %v", shard, err))
			} else {
				res.Done++
			}
		})
	}
	wg.Wait()
	n.syncIdentities(ctx)
	if len(res.Errors) > 0 {
		return res, fmt.Errorf("revoke %s: %d of %d shards did not apply it (resend to finish): %s", id, len(res.Errors), res.Shards, strings.Join(res.Errors, "; "))
	}
	return res, nil
}

// withRevoke adds POST /revoke?id=ID to h: an operator's revocation,
// authenticated by "Authorization: DSSP-Operator <hex HMAC>" of the mesh
// key (mesh.MeshKey.OperatorMAC(RevokeOp, id)); a node without
// Deps.VerifyOperator refuses every request. The reply is a JSON RevokeResult: 200 when every shard applied
// it, 503 with the errors otherwise, 403 for a bad or missing MAC.
func (n *Node) withRevoke(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("POST /revoke", func(w http.ResponseWriter, r *http.Request) {
		id := mesh.NodeID(r.URL.Query().Get("id"))
		if err := id.Validate(); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mac, err := hex.DecodeString(strings.TrimPrefix(r.Header.Get("Authorization"), "DSSP-Operator "))
		if n.verifyOp == nil || err != nil || !n.verifyOp(RevokeOp, string(id), mac) {
			n.log.Warn("refused a revocation over HTTP: not authenticated by the mesh key", "peer", id, "from", r.RemoteAddr)
			http.Error(w, "revoke: the request is not authenticated by this mesh's key (dssp revoke --key)", http.StatusForbidden)
			return
		}
		if id == n.id {
			http.Error(w, fmt.Sprintf("revoke %s: that is the node asked; ask another node (--node)", id), http.StatusBadRequest)
			return
		}
		n.log.Warn("revocation requested over HTTP", "peer", id, "from", r.RemoteAddr)
		ctx, cancel := context.WithTimeout(r.Context(), 40*time.Second)
		defer cancel()
		http.NewResponseController(w).SetWriteDeadline(time.Now().Add(45 * time.Second))
		res, err := n.Revoke(ctx, id, mac)
		code := http.StatusOK
		if err != nil {
			code = http.StatusServiceUnavailable
			if len(res.Errors) == 0 {
				res.Errors = []string{err.Error()}
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(res)
	})
	return mux
}
