package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"dsspmesh/node/status"
)

// TestStatusListsMembersHTTP: `dssp status` prints each member's HTTP
// address (what --node takes) in the MEMBER table, "-" for a member that
// has not answered yet.
func TestStatusListsMembersHTTP(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(status.Status{Node: "node-a", Phase: "training", HTTP: "10.0.0.1:7948", Now: time.Unix(10, 0),
			Members: []status.MemberStatus{
				{ID: "node-a", Gossip: "10.0.0.1:7946", QUIC: "10.0.0.1:7947", HTTP: "10.0.0.1:7948", Trains: true, Backend: "cpu"},
				{ID: "node-b", Gossip: "10.0.0.2:7946", QUIC: "10.0.0.2:7947", HTTP: "10.0.0.2:8000", Trains: false, Backend: "cpu"},
				{ID: "node-c", Gossip: "10.0.0.3:7946", QUIC: "10.0.0.3:7947", Trains: true, Backend: "cpu"},
			}})
	}))
	defer srv.Close()
	cmd := newStatusCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--node", strings.TrimPrefix(srv.URL, "http://")})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			rows[f[0]] = f
		}
	}
	if h := rows["MEMBER"]; len(h) < 4 || h[3] != "HTTP" {
		t.Fatalf("member header %v:\n%s", h, out.String())
	}
	for id, want := range map[string]string{"node-a": "10.0.0.1:7948", "node-b": "10.0.0.2:8000", "node-c": "-"} {
		if r := rows[id]; len(r) < 4 || r[3] != want {
			t.Errorf("member %s: %v, want HTTP %s\n%s", id, r, want, out.String())
		}
	}
}
