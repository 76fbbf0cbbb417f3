package trust

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"dsspmesh/clock"
	"dsspmesh/mesh"
	"dsspmesh/shardapi"
)

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
func (t *Trust) Revoke(ctx context.Context, id mesh.NodeID, mac []byte) (RevokeResult, error) {
	res := RevokeResult{ID: string(id)}
	if id == t.d.Self {
		return res, fmt.Errorf("revoke %s: that is the node asked; ask another node (the others would refuse this one before its shards applied it)", id)
	}
	if !t.verify(string(id), mac) {
		return res, t.Take(id, mac, "this node's HTTP API") // refused, paced
	}
	t.tell(ctx, id, mac)
	if err := t.Take(id, mac, "this node's HTTP API"); err != nil {
		return res, err
	}
	for _, m := range t.members.Members() {
		if m.ID != t.d.Self && m.ID != id {
			res.Members++
		}
	}
	res.Nodes = t.broadcast(ctx, id, mac)
	t.sync(ctx)
	sm := t.shards()
	if sm == nil {
		return res, fmt.Errorf("revoke %s: refused by %d of %d other members, but this node has no job yet, so no shard replicates it: ask a node that trains", id, res.Nodes, res.Members)
	}
	res.Shards = sm.Shards()
	resolve := mesh.ResolveFromMembership(t.members)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for s := range res.Shards {
		wg.Go(func() {
			shard := uint32(s)
			cfg := shardapi.DefaultClientConfig(shard, clock.WorkerID(t.d.Self), func() []mesh.NodeID { return sm.Candidates(shard) })
			cfg.Alive, cfg.Deadline = t.isMember, 30*time.Second
			err := func() error {
				c, err := shardapi.NewClient(cfg, t.d.Transport, resolve, t.d.Logger)
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
	t.sync(ctx)
	if len(res.Errors) > 0 {
		return res, fmt.Errorf("revoke %s: %d of %d shards did not apply it (resend to finish): %s", id, len(res.Errors), res.Shards, strings.Join(res.Errors, "; "))
	}
	return res, nil
}

// tell relays the revocation to the revoked node itself, before this node
// refuses it (after, it could not reach it): the node learns it is
// revoked, says so and stops (Trust.revokedSelf), where it would
// otherwise train on alone, its every request refused.
func (t *Trust) tell(ctx context.Context, id mesh.NodeID, mac []byte) {
	for _, m := range t.members.Members() {
		if m.ID == id {
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			if err := t.d.Relay(cctx, m, id, mac); err != nil {
				t.d.Logger.Info("telling the revoked node it is revoked", "peer", id, "err", err)
			}
			cancel()
		}
	}
}

// isMember reports whether id is in the node's membership view.
func (t *Trust) isMember(id mesh.NodeID) bool {
	for _, m := range t.members.Members() {
		if m.ID == id {
			return true
		}
	}
	return false
}

// broadcast relays an operator's revocation of id to every other member
// but id and returns how many took it, so each refuses id at once: a
// revoked leader then loses its followers, which elect another that
// applies the revocation to the shard.
func (t *Trust) broadcast(ctx context.Context, id mesh.NodeID, mac []byte) int {
	var wg sync.WaitGroup
	var took atomic.Int64
	for _, m := range t.members.Members() {
		if m.ID == t.d.Self || m.ID == id {
			continue
		}
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			if err := t.d.Relay(cctx, m, id, mac); err != nil {
				t.d.Logger.Warn("relaying a revocation", "peer", m.ID, "revoked", id, "err", err)
				return
			}
			took.Add(1)
		})
	}
	wg.Wait()
	return int(took.Load())
}

// WithRevoke adds POST /revoke?id=ID to h: an operator's revocation,
// authenticated by "Authorization: DSSP-Operator <hex HMAC>" of the mesh
// key (mesh.MeshKey.OperatorMAC(RevokeOp, id)); a node without
// Deps.Verify refuses every request. The reply is a JSON RevokeResult:
// 200 when every shard applied it, 503 with the errors otherwise, 403 for
// a bad or missing MAC.
func (t *Trust) WithRevoke(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("POST /revoke", func(w http.ResponseWriter, r *http.Request) {
		id := mesh.NodeID(r.URL.Query().Get("id"))
		if err := id.Validate(); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mac, err := hex.DecodeString(strings.TrimPrefix(r.Header.Get("Authorization"), "DSSP-Operator "))
		if err != nil || !t.verify(string(id), mac) {
			t.refuse("POST /revoke", "peer", id, "from", r.RemoteAddr)
			http.Error(w, "revoke: the request is not authenticated by this mesh's key (dssp revoke --key)", http.StatusForbidden)
			return
		}
		if id == t.d.Self {
			http.Error(w, fmt.Sprintf("revoke %s: that is the node asked; ask another node (--node)", id), http.StatusBadRequest)
			return
		}
		t.d.Logger.Warn("revocation requested over HTTP", "peer", id, "from", r.RemoteAddr)
		ctx, cancel := context.WithTimeout(r.Context(), 40*time.Second)
		defer cancel()
		http.NewResponseController(w).SetWriteDeadline(time.Now().Add(45 * time.Second))
		res, err := t.Revoke(ctx, id, mac)
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
