package test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// The hostile-member cases of issue 48 (docs/security.md, "Trust, second
// round"): run by TestHostileMember after issue 37's, on the same mesh.
// With DSSP_HOSTILE_OLD_BINARY set to the build before issue 48's fixes
// (9f3b089) run them alone (-run 'TestHostileMember/(slow-reader-storm|…)'):
// each must succeed there.
func hostile48Cases() []hostileCase {
	return []hostileCase{
		{name: "slow-reader-storm", fixed: true, run: func(t *testing.T, c *Cluster, h *Hostile) []string {
			// 40 connections pipeline 16 requests for the model each and
			// read nothing; an honest `dssp export` of the same node must
			// succeed within its timeout, and the node must let go of
			// every storm connection within a bounded time.
			if _, err := os.Stat("/proc/net/tcp"); err != nil {
				t.Skip("no /proc/net/tcp (Linux) to read the node's end of a connection from")
			}
			node := c.Mesh.Procs[1]
			var rs []*SlowReader
			for range 40 {
				r, err := NewSlowReader(node.HTTP, "/model.safetensors", 16)
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				rs = append(rs, r)
			}
			start := time.Now()
			// The storm holds the node once it writes responses they do
			// not read: the honest export comes then.
			stalled := 0
			waitUntil(10*time.Second, func() bool {
				stalled = 0
				for _, r := range rs {
					if r.Stalled() {
						stalled++
					}
				}
				return stalled >= 2
			})
			t.Logf("%v after they asked, the node writes to %d storm connections that do not read", time.Since(start).Round(100*time.Millisecond), stalled)
			exportStart := time.Now()
			out := filepath.Join(t.TempDir(), "model.safetensors")
			b, err := exec.Command(c.Mesh.Binary, "export", "--node", node.HTTP, "--out", out, "--timeout", "30s").CombinedOutput()
			took := time.Since(exportStart).Round(100 * time.Millisecond)
			var got []string
			if err != nil {
				got = append(got, fmt.Sprintf("an honest dssp export --timeout 30s under 40 × 16 requests that never read failed after %v: %s", took, lastLine(string(b))))
			} else {
				t.Logf("the honest export took %v under the storm: %s", took, lastLine(string(b)))
			}
			const limit = 30 * time.Second
			held := 0
			waitUntil(time.Until(start.Add(limit)), func() bool {
				held = 0
				for _, r := range rs {
					if st, err := r.ServerState(); err == nil && st == "ESTABLISHED" {
						held++
					}
				}
				return held == 0
			})
			t.Logf("%v after they asked, the node holds %d of the 40 storm connections", time.Since(start).Round(time.Second), held)
			if held > 0 {
				got = append(got, fmt.Sprintf("%d of 40 storm connections still held open by the node %v after they asked", held, time.Since(start).Round(time.Second)))
			}
			return append(got, trainsOn(c, 5, 30*time.Second)...)
		}},
	}
}
