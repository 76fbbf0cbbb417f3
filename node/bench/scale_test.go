package bench

import (
	"dsspmesh/mesh"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"dsspmesh/node"
)

func TestParseMetricsSumsLabelSets(t *testing.T) {
	text := `# HELP dssp_gossip_sent_bytes_total x
# TYPE dssp_gossip_sent_bytes_total counter
dssp_gossip_sent_bytes_total{proto="tcp"} 100
dssp_gossip_sent_bytes_total{proto="udp"} 23.5
dssp_raft_heartbeats_total 7
go_goroutines 42
go_goroutines_other 1
`
	m, err := parseMetrics(strings.NewReader(text), "dssp_gossip_sent_bytes_total", "dssp_raft_heartbeats_total", "go_goroutines")
	if err != nil {
		t.Fatal(err)
	}
	if m["dssp_gossip_sent_bytes_total"] != 123.5 || m["dssp_raft_heartbeats_total"] != 7 || m["go_goroutines"] != 42 {
		t.Fatalf("got %v", m)
	}
	if _, err := parseMetrics(strings.NewReader(text), "absent_total"); err == nil || !strings.Contains(err.Error(), "absent_total") {
		t.Fatalf("a missing metric must be named, got %v", err)
	}
}

func TestLedNeedsFullVotersAndMovedCountsNewReplicas(t *testing.T) {
	st := []*node.Status{
		{Shards: []node.ShardStatus{
			{ID: 0, Local: "leader", Term: 2, Placement: []string{"a", "b", "c"}, Voters: []string{"c", "b", "a"}},
			{ID: 1, Local: "follower"},
		}},
		{Shards: []node.ShardStatus{
			{ID: 0, Local: "follower"},
			{ID: 1, Local: "leader", Term: 1, Placement: []string{"a", "b", "d"}, Voters: []string{"a", "b"}},
		}},
	}
	if msg := unled(st, 3); !strings.Contains(msg, "shard 1") {
		t.Fatalf("shard 1 lacks a voter, got %q", msg)
	}
	st[1].Shards[1].Voters = []string{"d", "a", "b"}
	if !allLed(st, 3) {
		t.Fatal(unled(st, 3))
	}
	before := map[uint32][]string{0: {"a", "b", "c"}, 1: {"a", "b", "c"}}
	if n := moved(before, votersOf(st)); n != 1 {
		t.Fatalf("moved %d, want 1 (d replaced c in shard 1)", n)
	}
}

func TestParseScaleVariant(t *testing.T) {
	v, err := ParseScaleVariant("fixed:--raft-timing=fixed --log-level=warn")
	if err != nil || v.Name != "fixed" || len(v.Flags) != 2 {
		t.Fatalf("%+v %v", v, err)
	}
	if v, err := ParseScaleVariant("plain:"); err != nil || len(v.Flags) != 0 {
		t.Fatalf("%+v %v", v, err)
	}
	for _, bad := range []string{"noflags", ":--x", "a:b"} {
		if _, err := ParseScaleVariant(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestScaleConfigValidateNamesTheFlag(t *testing.T) {
	c := DefaultScaleConfig()
	c.Binary = "dssp"
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	for flag, mod := range map[string]func(*ScaleConfig){
		"--nodes":       func(c *ScaleConfig) { c.Nodes = []int{70} },
		"--shards":      func(c *ScaleConfig) { c.Shards = []int{0} },
		"--replication": func(c *ScaleConfig) { c.Replication = 0 },
		"--idle":        func(c *ScaleConfig) { c.Idle = 0 },
		"--detection":   func(c *ScaleConfig) { c.Detection = "wan" },
	} {
		bad := c
		mod(&bad)
		if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%s: got %v", flag, err)
		}
	}
}

func TestScaleCSVAccumulatesAndRenders(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "scale.csv")
	for _, p := range []ScalePoint{
		{Variant: "default", Nodes: 8, Shards: 4, Replicas: 3, Members: time.Second, Led: 2 * time.Second, Expected: 1.3, JoinMoved: 2},
		{Variant: "default", Nodes: 4, Shards: 4, Replicas: 3, Members: time.Second, Idle: NodeCost{RSS: 100, CPU: 0.05}},
		{Variant: "default", Nodes: 4, Shards: 4, Replicas: 3, Members: 3 * time.Second}, // replaces the row above
		{Variant: "default", Nodes: 16, Shards: 4, Err: "not converged"},
	} {
		if err := appendScaleCSV(path, p); err != nil {
			t.Fatal(err)
		}
	}
	res, err := LoadScale(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Points) != 3 || res.Points[0].Nodes != 4 || res.Points[0].Members != 3*time.Second {
		t.Fatalf("points %+v", res.Points)
	}
	if err := res.Write(dir); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(filepath.Join(dir, "scale.md"))
	if !strings.Contains(string(md), "failed: not converged") || !strings.Contains(string(md), "| default | 8 | 4 |") {
		t.Fatalf("table:\n%s", md)
	}
	if fi, err := os.Stat(filepath.Join(dir, "scale.png")); err != nil || fi.Size() == 0 {
		t.Fatalf("plot: %v", err)
	}
}

// BenchmarkPlaceAll is one node's placement upkeep: shardManager.sync
// places every shard over the live members every 300 ms (mesh.Place
// hashes and sorts all N ids per shard, O(S·N·log N)). docs/scale.md
// extrapolates the 1 000-node, 4 000-shard mesh from it.
func BenchmarkPlaceAll(b *testing.B) {
	for _, c := range []struct{ n, s int }{{32, 64}, {1000, 4000}} {
		b.Run(fmt.Sprintf("N=%d/S=%d", c.n, c.s), func(b *testing.B) {
			ids := make([]mesh.NodeID, c.n)
			for i := range ids {
				ids[i] = mesh.NodeID(fmt.Sprintf("node-%08x", i*2654435761))
			}
			for b.Loop() {
				mesh.PlaceAll(c.s, ids, 3)
			}
		})
	}
}
