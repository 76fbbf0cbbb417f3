package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"dsspmesh/mesh"
	"dsspmesh/node/status"
	"dsspmesh/node/trust"
)

// TestRevokeSendsTheOperatorMAC: `dssp revoke` posts the id with the
// mesh key's operator MAC, prints what the node reached, and reports a
// refusal with the node's reason; `dssp status` lists revoked ids.
func TestRevokeSendsTheOperatorMAC(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "mesh.key")
	if err := mesh.WriteKeyFile(keyFile); err != nil {
		t.Fatal(err)
	}
	key, err := mesh.LoadKeyFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	const victim = "node-0a1b2c3d"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/revoke":
			mac, _ := hex.DecodeString(strings.TrimPrefix(r.Header.Get("Authorization"), "DSSP-Operator "))
			id := r.URL.Query().Get("id")
			if r.Method != http.MethodPost || !hmac.Equal(mac, key.OperatorMAC(trust.RevokeOp, id)) {
				http.Error(w, "not authenticated", http.StatusForbidden)
				return
			}
			json.NewEncoder(w).Encode(trust.RevokeResult{ID: id, Shards: 4, Done: 4, Nodes: 2, Members: 2})
		case "/status":
			json.NewEncoder(w).Encode(status.Status{Node: "node-a", Phase: "training", Revoked: []string{victim}})
		}
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	run := func(args ...string) (string, error) {
		cmd := newRootCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(args)
		err := cmd.ExecuteContext(context.Background())
		return out.String(), err
	}
	out, err := run("revoke", "--node", addr, "--key", keyFile, victim)
	if err != nil || !strings.Contains(out, "revoked "+victim+": applied by 4 of 4 shards") {
		t.Fatalf("revoke: %v\n%s", err, out)
	}
	other := filepath.Join(t.TempDir(), "other.key")
	if err := mesh.WriteKeyFile(other); err != nil {
		t.Fatal(err)
	}
	if _, err := run("revoke", "--node", addr, "--key", other, victim); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("revoke under another key: %v", err)
	}
	if _, err := run("revoke", "--node", addr, "--key", keyFile, "a b"); err == nil || !strings.Contains(err.Error(), "NODE-ID") {
		t.Fatalf("a bad id: %v", err)
	}
	os.Chmod(keyFile, 0o644)
	if _, err := run("revoke", "--node", addr, "--key", keyFile, victim); err == nil || !strings.Contains(err.Error(), "--key") {
		t.Fatalf("a readable key file: %v", err)
	}
	out, err = run("status", "--node", addr)
	if err != nil || !strings.Contains(out, "revoked: "+victim) {
		t.Fatalf("status: %v\n%s", err, out)
	}
}
