package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"testing"
	"time"

	"dsspmesh/node/records"
	"dsspmesh/node/status"
)

// TestAnyNodeShowsEveryShard runs five nodes that do not train, joined by
// the host name localhost, with
// replication 3, so some node hosts no replica of some shard k: `dssp status
// --json` on that node must still name k's leader (learnt from a member
// that hosts it), and when that leader is killed the node records the
// failure and the new leader in its events.
func TestAnyNodeShowsEveryShard(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	const nodes, shards, replication = 5, 4, 3
	c := NewCluster(t, nodes, []string{"--train=false", "--log-level", "warn"},
		[]string{"--shards", fmt.Sprint(shards), "--replication", fmt.Sprint(replication)})
	// Every node is given the same --join by host name, as the pods of a
	// Kubernetes StatefulSet are: node 0 finds only itself there and
	// starts the mesh, the others resolve it and join.
	_, port, _ := net.SplitHostPort(c.Mesh.Procs[0].Gossip)
	for i := range nodes {
		c.Mesh.SetJoin(i, "localhost:"+port)
		c.Start(i)
	}

	// Some node i hosts no replica of some shard k, whose leader says so
	// itself; `dssp status --json` on node i must name that leader.
	outsider, k, leaderIdx := -1, uint32(0), -1
	var got status.Status
	c.WaitFor("a node with no replica of a shard names that shard's leader in dssp status --json", 120*time.Second, func() bool {
		st := c.Statuses()
		for _, s := range st {
			if s == nil || len(s.Members) != nodes || len(s.Shards) != shards {
				return false
			}
		}
		for sh := range uint32(shards) {
			for l, s := range st {
				if s.Shards[sh].Local != "leader" || len(s.Shards[sh].Voters) != replication {
					continue
				}
				for i := range st {
					if slices.Contains(s.Shards[sh].Voters, st[i].Node) {
						continue
					}
					got = statusCommand(t, c, i, "--json")
					if g := got.Shards[sh]; g.Local == "" && g.Leader == s.Node && g.Term == s.Shards[sh].Term && slices.Equal(g.Voters, s.Shards[sh].Voters) {
						outsider, k, leaderIdx = i, sh, l
						return true
					}
				}
			}
		}
		return false
	})
	leader := got.Shards[k].Leader
	sh := got.Shards[k]
	t.Logf("dssp status --json --node %s (node%d, %s): shard %d leader %s term %d voters %v (via %s, %.1fs old)",
		c.Mesh.Procs[outsider].HTTP, outsider, got.Node, k, sh.Leader, sh.Term, sh.Voters, sh.From, sh.AgeSeconds)
	if sh.From == "" || slices.Contains(sh.Voters, got.Node) {
		t.Fatalf("shard %d as node%d shows it: %+v", k, outsider, sh)
	}
	text, err := exec.Command(Binary(t), "status", "--node", c.Mesh.Procs[outsider].HTTP).CombinedOutput()
	if err != nil {
		t.Fatalf("dssp status: %v\n%s", err, text)
	}
	t.Logf("dssp status --node %s:\n%s", c.Mesh.Procs[outsider].HTTP, text)

	// Kill k's leader: the outsider records the failure and shard k's new
	// leader, which its status names.
	c.Kill(leaderIdx)
	c.WaitFor(fmt.Sprintf("node%d records %s failed and a new leader of shard %d", outsider, leader, k), 60*time.Second, func() bool {
		s, err := c.Status(outsider)
		if err != nil {
			return false
		}
		failed, led := false, false
		for _, e := range s.Events {
			failed = failed || (e.Kind == records.EventFailed && e.Node == leader)
			led = led || (e.Kind == records.EventLeader && e.Shard != nil && *e.Shard == k && e.Node != leader)
		}
		got = s
		return failed && led && s.Shards[k].Leader != "" && s.Shards[k].Leader != leader
	})
	for _, e := range got.Events {
		t.Logf("event %s %-8s %-14s %s", e.At.Format("15:04:05.000"), e.Kind, e.Node, e.Detail)
	}
}

// statusCommand runs `dssp status --node <node i> args...` and decodes its
// JSON.
func statusCommand(t *testing.T, c *Cluster, i int, args ...string) status.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, Binary(t), append([]string{"status", "--node", c.Mesh.Procs[i].HTTP}, args...)...).Output()
	if err != nil {
		t.Fatalf("dssp status: %v", err)
	}
	var s status.Status
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatalf("dssp status --json: %v\n%s", err, out)
	}
	return s
}
