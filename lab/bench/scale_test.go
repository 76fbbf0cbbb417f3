package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"dsspmesh/mesh"
	"dsspmesh/node/records"
	"dsspmesh/node/status"
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

// settledStatuses is one poll of nodes ids where every node lists members
// and each of shards has a leader (the first replica placement names) whose
// placement and voters are placement over members.
func settledStatuses(ids, members []mesh.NodeID, shards, r int) []*status.Status {
	var st []*status.Status
	for _, id := range ids {
		s := &status.Status{Node: string(id)}
		for _, m := range members {
			s.Members = append(s.Members, status.MemberStatus{ID: string(m)})
		}
		all := mesh.PlaceAll(shards, members, r)
		for sh := uint32(0); sh < uint32(shards); sh++ {
			var place []string
			for _, n := range all[sh] {
				place = append(place, string(n))
			}
			e := records.ShardStatus{ID: sh, Term: 1, Placement: place}
			if place[0] == string(id) {
				e.Local, e.Voters = "leader", slices.Clone(place)
			}
			s.Shards = append(s.Shards, e)
		}
		st = append(st, s)
	}
	return st
}

func TestSettledNeedsEveryNodeAndRendezvousVoters(t *testing.T) {
	ids := []mesh.NodeID{"node-a", "node-b", "node-c", "node-d", "node-e"}
	const shards, r = 16, 3
	st := settledStatuses(ids, ids, shards, r)
	if why := unsettled(st, 5, shards, r); why != "" {
		t.Fatal(why)
	}
	missing := slices.Clone(st)
	missing[2] = nil
	if why := unsettled(missing, 5, shards, r); !strings.Contains(why, "did not answer") {
		t.Fatalf("a node missing from the poll: %q", why)
	}
	last, missedPolls := make([]*status.Status, len(st)), make([]int, len(st))
	fillMissed(slices.Clone(st), last, missedPolls)
	for range maxMissed {
		if why := unsettled(fillMissed(slices.Clone(missing), last, missedPolls), 5, shards, r); why != "" {
			t.Fatalf("a node's last answer stands in for %d missed polls: %q", maxMissed, why)
		}
	}
	if why := unsettled(fillMissed(slices.Clone(missing), last, missedPolls), 5, shards, r); !strings.Contains(why, "did not answer") {
		t.Fatalf("a node missing %d polls in a row: %q", maxMissed+1, why)
	}
	// Every leader's voters equal its own placement, but that placement
	// was computed without node-e (a membership view under load): the
	// count taken from it would be wrong, so the poll is not settled.
	stale := settledStatuses(ids, ids[:4], shards, r)
	for _, s := range stale {
		s.Members = st[0].Members
	}
	if why := unsettled(stale, 5, shards, r); !strings.Contains(why, "places it on") {
		t.Fatalf("placement over 4 of 5 members: %q", why)
	}
	lagging := settledStatuses(ids, ids, shards, r)
	for _, s := range lagging {
		for k := range s.Shards {
			if len(s.Shards[k].Voters) > 0 {
				s.Shards[k].Voters = s.Shards[k].Voters[:2]
				break
			}
		}
	}
	if why := unsettled(lagging, 5, shards, r); !strings.Contains(why, "voters") {
		t.Fatalf("a shard with a voter missing: %q", why)
	}
	other := settledStatuses(ids, ids, shards, r)
	other[1].Members[4].ID = "node-x"
	if why := unsettled(other, 5, shards, r); !strings.Contains(why, "other members") {
		t.Fatalf("two views of the members: %q", why)
	}

	// Between settled polls, the replicas moved are placement's own: those
	// placed anew when node-e joins node-a..d.
	before := votersOf(settledStatuses(ids[:4], ids[:4], shards, r))
	after := votersOf(st)
	want, old, cur := 0, mesh.PlaceAll(shards, ids[:4], r), mesh.PlaceAll(shards, ids, r)
	for sh := range cur {
		for _, n := range cur[sh] {
			if !slices.Contains(old[sh], n) {
				want++
			}
		}
	}
	if n := moved(before, after); n != want || want == 0 {
		t.Fatalf("moved %d, want %d (the replicas placed anew when node-e joined)", n, want)
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
	even := c
	even.Replication = 2 // the nodes would refuse it
	if err := even.Validate(); err == nil || !strings.Contains(err.Error(), "--replication 2 is even") {
		t.Errorf("--replication 2: got %v", err)
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

// BenchmarkPlaceAll is one node's placement upkeep: shards.Manager.sync (node/shards)
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
