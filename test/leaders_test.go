package test

import (
	"os/exec"
	"regexp"
	"testing"
	"time"
)

// TestLeadersSpread: a mesh of four real processes started with --shards 8
// (small slices: the MLP) does not keep every leader on its bootstrap
// node: they spread to two a node, as `dssp status` shows (LEADS); after a
// kill -9 of a node its shards are led by the survivors, and once it is
// restarted on its data dir it leads its share again.
func TestLeadersSpread(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	c := NewCluster(t, 4, []string{"--threads", "1", "--eval-every", "5s", "--eval-samples", "500", "--log-level", "warn"},
		[]string{"--model", "mlp", "--shards", "8"})
	for i := range 4 {
		c.Start(i)
	}
	spread := func(what string, nodes []int, most int) {
		t.Helper()
		c.WaitFor(what, 90*time.Second, func() bool {
			counts := map[int]int{}
			for s, i := range Leaders(c.Statuses()) {
				if s >= 8 {
					return false
				}
				counts[i]++
			}
			total := 0
			for _, i := range nodes {
				if counts[i] == 0 || counts[i] > most {
					return false
				}
				total += counts[i]
			}
			return total == 8
		})
	}
	spread("8 leaders, 2 on each node", []int{0, 1, 2, 3}, 2)
	// dssp status shows it. A shard can be between leaders when the
	// command runs (an election on a loaded box): it is asked again.
	var out []byte
	n := 0
	if !waitUntil(30*time.Second, func() bool {
		var err error
		out, err = exec.Command(Binary(t), "status", "--node", c.Mesh.Procs[0].HTTP).CombinedOutput()
		if err != nil {
			t.Fatalf("dssp status: %v\n%s", err, out)
		}
		n = len(regexp.MustCompile(`(?m)^node-\S+\s.*\s2\s+[0-9.]+ms$|^node-\S+\s.*\s2\s+-$`).FindAll(out, -1))
		return n == 4
	}) {
		t.Errorf("dssp status shows %d members leading 2 shards, want 4:\n%s", n, out)
	}
	c.Kill(3)
	spread("node3's shards led by the three others", []int{0, 1, 2}, 3)
	c.Restart(3)
	spread("node3 back, leading its share", []int{0, 1, 2, 3}, 3)
}
