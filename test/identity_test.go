package test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"dsspmesh/mesh"
	"dsspmesh/node"
	"dsspmesh/node/datadir"
	"dsspmesh/node/trust"
	"dsspmesh/nodeclient"
)

// TestLegacyIDPinnedAndRevokedAcrossProcesses runs three dssp node
// processes, one of them on a data dir of a build before self-certifying
// ids (a node-id file and its node.key) that the two others pinned under
// an earlier build (their identities.json: an upgraded mesh): it keeps its
// id and trains. A member holding the mesh key is answered under its own
// id and refused under a certificate it minted for node 0's id, and under
// a legacy id no node pinned. dssp revoke's request (the mesh key's operator
// MAC) then revokes it through another node: both shards' groups apply
// it, every other node lists it in /status and drops it from its members
// and the shards' workers, and a node killed and restarted still lists it.
func TestLegacyIDPinnedAndRevokedAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	c := NewCluster(t, 3, []string{"--threads", "1", "--log-level", "warn"},
		[]string{"--model", "mlp", "--dataset", "synthetic-mnist", "--paradigm", "ssp", "--s-lower", "2", "--shards", "2", "--replication", "3"})
	const legacy = "node-0a1b2c3d"
	legacyKey, err := mesh.GenerateNodeKey()
	if err != nil {
		t.Fatal(err)
	}
	pins, err := json.Marshal(datadir.Identities{Pins: map[mesh.NodeID]ed25519.PublicKey{legacy: legacyKey.Public().(ed25519.PublicKey)}})
	if err != nil {
		t.Fatal(err)
	}
	for i, files := range []map[string][]byte{{"identities.json": pins}, {"identities.json": pins}, {"node-id": []byte(legacy + "\n"), "node.key": legacyKey.Seed()}} {
		if err := os.MkdirAll(c.Mesh.Procs[i].DataDir, 0o700); err != nil {
			t.Fatal(err)
		}
		for name, b := range files {
			if err := os.WriteFile(filepath.Join(c.Mesh.Procs[i].DataDir, name), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	c.Start(0)
	c.Start(1)
	c.Start(2)
	c.WaitFor("3 members training, both shards with 3 voters, the legacy id pinned by the others", 90*time.Second, func() bool {
		for i, s := range c.Statuses() {
			if s == nil || len(s.Members) != 3 || s.Worker == nil || s.Worker.Iter < 5 || len(s.Shards) != 2 {
				return false
			}
			for _, sh := range s.Shards {
				if len(sh.Voters) != 3 {
					return false
				}
			}
			if i < 2 && s.PinnedKeys < 1 {
				return false
			}
		}
		return true
	})
	st := c.Statuses()
	if st[2].Node != legacy {
		t.Fatalf("the legacy data dir's node runs as %q", st[2].Node)
	}
	for i := range 2 {
		if !mesh.NodeID(st[i].Node).SelfCertifying() {
			t.Fatalf("node%d's fresh data dir has id %q, not a self-certifying one", i, st[i].Node)
		}
	}

	// A member holding the mesh key asks node 1 for the job spec on the
	// control channel: under its own self-certifying id it is answered;
	// under a certificate it minted for node 0's id on its own key it is
	// refused in the handshake.
	key, sec := c.meshSecurity(t)
	ask := func(creds *mesh.NodeCredentials) error {
		cfg := mesh.DefaultTransportConfig("127.0.0.1:0")
		tr, err := mesh.NewQUICTransport(cfg, creds, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := tr.Dial(ctx, mesh.NodeID(st[1].Node), c.Mesh.Procs[1].QUIC, mesh.Channel{Kind: mesh.KindRPC, Shard: node.ControlShard})
		if err != nil {
			return err
		}
		defer s.Close()
		s.SetDeadline(time.Now().Add(5 * time.Second))
		if err := s.SendFrame(controlMsg{Op: "spec"}, nil); err != nil {
			return err
		}
		var rep controlMsg
		if _, err := s.RecvFrame(&rep); err != nil {
			return err
		}
		if len(rep.Spec) == 0 {
			return fmt.Errorf("no spec in the answer")
		}
		return nil
	}
	own, err := mesh.GenerateNodeKey()
	if err != nil {
		t.Fatal(err)
	}
	honest, err := sec.NodeWithKey(mesh.DeriveID(own.Public().(ed25519.PublicKey)), own)
	if err != nil {
		t.Fatal(err)
	}
	if err := ask(honest); err != nil {
		t.Fatalf("a member under its own id was refused: %v", err)
	}
	minted, err := sec.IssueUnchecked(mesh.NodeID(st[0].Node), own)
	if err != nil {
		t.Fatal(err)
	}
	if err := ask(minted); err == nil {
		t.Fatalf("a certificate minted for %s's id was answered", st[0].Node)
	} else {
		t.Logf("a certificate minted for node 0's id: %v", err)
	}
	fresh, err := sec.NodeWithKey("node-0fffffff", own)
	if err != nil {
		t.Fatal(err)
	}
	if err := ask(fresh); err == nil {
		t.Fatal("a legacy id no node pinned was answered")
	} else {
		t.Logf("a legacy id no node pinned: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	res, err := nodeclient.Revoke(ctx, c.Mesh.Procs[0].HTTP, legacy, key.OperatorMAC(trust.RevokeOp, legacy), time.Minute)
	if err != nil || res.Done != 2 {
		t.Fatalf("revoke: %+v %v", res, err)
	}
	t.Logf("dssp revoke answered in %v: %+v", time.Since(start).Round(time.Millisecond), res)
	refused := func(i int) bool {
		s, err := c.Status(i)
		if err != nil || !slices.Contains(s.Revoked, legacy) || len(s.Members) != 2 {
			return false
		}
		for _, w := range s.Workers {
			if w.ID == legacy {
				return false
			}
		}
		return true
	}
	c.WaitFor("nodes 0 and 1 refuse the revoked node and drop it", 60*time.Second, func() bool { return refused(0) && refused(1) })
	t.Logf("every other node refuses it %v after the request", time.Since(start).Round(time.Millisecond))
	c.Kill(1)
	c.Restart(1)
	c.WaitFor("node 1, restarted, still refuses the revoked node", 60*time.Second, func() bool { return refused(1) })
	if s, _ := c.Status(1); s.PinnedKeys < 1 {
		t.Fatalf("node 1 lost its pin of the legacy id across the restart: %d pinned", s.PinnedKeys)
	}
	i0 := c.Iter(0)
	c.WaitFor("node 0 trains on", 60*time.Second, func() bool { return c.Iter(0) > i0+5 })
}
