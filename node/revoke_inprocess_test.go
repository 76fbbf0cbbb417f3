package node_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"dsspmesh/mesh"
	"dsspmesh/node"
	"dsspmesh/node/status"
	"dsspmesh/node/trust"
)

// TestRevokedNodeIsRefusedEverywhere runs three in-process training nodes
// (every one a replica of both shards) and revokes one through another's
// HTTP API: a request without the mesh key's MAC is refused and changes
// nothing; the authenticated one is applied by both shards' groups; every
// other node then lists the id as revoked in /status, drops it from its
// members and from the shards' workers, and refuses its streams (its
// pushes fail), while the two others go on training.
func TestRevokedNodeIsRefusedEverywhere(t *testing.T) {
	rec := newRecorder()
	m := startMesh(t, 3, 2, rec)
	ids := m.ids()
	// Revoking a node costs its shards a voter, as its failure would: wait
	// until all three vote in both shards' groups.
	rec.wait(t, "every worker has pushed and both shards have three voters", func() bool {
		return rec.allAcked(ids, 3) && rec.leaderOf(0) != "" && m.fullyReplicated(2, 3)
	})
	// The hard case: the node revoked leads shard 0, so its followers must
	// stop hearing it and elect another before the shard can apply it.
	victim := rec.leaderOf(0)
	var survivors []mesh.NodeID
	for _, id := range ids {
		if id != victim {
			survivors = append(survivors, id)
		}
	}
	via := survivors[0]
	httpOf := map[mesh.NodeID]string{}
	m.mu.Lock()
	for id, nd := range m.nodes {
		httpOf[id] = nd.http
	}
	m.mu.Unlock()

	ctx := context.Background()
	// revoke is what nodeclient.Revoke (dssp revoke) sends.
	revoke := func(mac []byte) (trust.RevokeResult, int) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+httpOf[via]+"/revoke?id="+string(victim), nil)
		if mac != nil {
			req.Header.Set("Authorization", "DSSP-Operator "+hex.EncodeToString(mac))
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out trust.RevokeResult
		json.NewDecoder(res.Body).Decode(&out)
		return out, res.StatusCode
	}
	forged := testOperatorKey
	forged[0]++
	if _, code := revoke(forged.OperatorMAC(trust.RevokeOp, string(victim))); code != http.StatusForbidden {
		t.Fatalf("revocation under another key: %d", code)
	}
	if _, code := revoke(nil); code != http.StatusForbidden {
		t.Fatalf("revocation without a MAC: %d", code)
	}
	self, _ := http.NewRequest(http.MethodPost, "http://"+httpOf[via]+"/revoke?id="+string(via), nil)
	self.Header.Set("Authorization", "DSSP-Operator "+hex.EncodeToString(testOperatorKey.OperatorMAC(trust.RevokeOp, string(via))))
	if res, err := http.DefaultClient.Do(self); err != nil || res.StatusCode != http.StatusBadRequest {
		t.Fatalf("a node asked to revoke itself: %v %v", res, err)
	}
	statusOf := func(id mesh.NodeID) status.Status {
		res, err := http.Get("http://" + httpOf[id] + "/status")
		if err != nil {
			return status.Status{}
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		var s status.Status
		json.Unmarshal(b, &s)
		return s
	}
	if s := statusOf(via); len(s.Revoked) != 0 || len(s.Members) != 3 {
		t.Fatalf("refused requests changed the node: revoked %v, %d members", s.Revoked, len(s.Members))
	}

	if res, code := revoke(testOperatorKey.OperatorMAC(trust.RevokeOp, string(victim))); code != http.StatusOK || res.Done != 2 || res.Shards != 2 || res.Nodes != 1 {
		t.Fatalf("revoke: %d %+v", code, res)
	}
	rec.wait(t, "every other node refuses the revoked node and drops it", func() bool {
		for _, id := range survivors {
			s := statusOf(id)
			if !slices.Contains(s.Revoked, string(victim)) || len(s.Members) != 2 {
				return false
			}
			for _, w := range s.Workers {
				if w.ID == string(victim) {
					return false
				}
			}
		}
		return true
	})
	before := rec.ackedSnapshot()
	rec.wait(t, "the others train on", func() bool {
		return rec.allAcked(survivors, max(before[survivors[0]], before[survivors[1]])+20)
	})
	if got := rec.ackedSnapshot()[victim]; got > before[victim]+1 {
		t.Fatalf("the revoked node's pushes were acknowledged after its revocation: %d, then %d", before[victim], got)
	}
	// The revoked node was told before it was cut off: it stopped, its Run
	// ending with an error that says so.
	m.mu.Lock()
	vn := m.nodes[victim]
	delete(m.nodes, victim)
	m.mu.Unlock()
	select {
	case err := <-vn.done:
		if !errors.Is(err, node.ErrRevoked) || !strings.Contains(err.Error(), "operator revoked this node") {
			t.Fatalf("the revoked node's Run returned %v, want node.ErrRevoked saying so", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the revoked node runs on a minute after its revocation")
	}
	// It cannot open a stream to a node that knows, under its id.
	vtr, err := m.net.NewTransport(victim, "victim-again", mesh.DefaultFrameLimits())
	if err != nil {
		t.Fatal(err)
	}
	defer vtr.Close()
	if _, err := vtr.Dial(ctx, via, statusOf(via).QUIC, mesh.Channel{Kind: mesh.KindRPC, Shard: 0}); err == nil || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("the revoked node's dial: %v", err)
	}
}
