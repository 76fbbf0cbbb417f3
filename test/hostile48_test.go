package test

import (
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"dsspmesh/node/launch"
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
		{name: "foreign-spec-joiner", fixed: true, run: func(t *testing.T, c *Cluster, h *Hostile) []string {
			// A node holding the mesh key joins with another job's spec
			// (--paradigm ssp where the mesh runs dssp) and is refused:
			// while it is a gossip member it must never be in a shard's
			// placement or configuration, nor move a leadership.
			dir := t.TempDir()
			key, err := os.ReadFile(c.Mesh.Key)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "mesh.key"), key, 0o600); err != nil {
				t.Fatal(err)
			}
			jm, err := launch.NewMesh(c.Mesh.Binary, dir, 1, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			jm.AddArgs(0, "--join", c.Mesh.Procs[0].Gossip, "--threads", "1", "--log-level", "warn", "--model", "mlp", "--paradigm", "ssp", "--s-lower", "2")
			known := map[string]bool{}
			leaders := map[uint32]string{}
			for _, s := range c.Statuses() {
				if s != nil {
					known[s.Node] = true
				}
			}
			for shard, i := range Leaders(c.Statuses()) {
				leaders[shard] = c.Statuses()[i].Node
			}
			if err := jm.Start(0); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { jm.Stop(5 * time.Second) })
			var got []string
			seen := map[string]bool{}
			member := false
			exited := waitUntil(60*time.Second, func() bool {
				for _, s := range c.Statuses() {
					if s == nil {
						continue
					}
					for _, m := range s.Members {
						member = member || !known[m.ID]
					}
					for _, sh := range s.Shards {
						for _, id := range append(append([]string{}, sh.Placement...), sh.Voters...) {
							if !known[id] && !seen[fmt.Sprintf("%d/%s", sh.ID, id)] {
								seen[fmt.Sprintf("%d/%s", sh.ID, id)] = true
								got = append(got, fmt.Sprintf("%s put the refused joiner %s in shard %d's placement or voters", s.Node, id, sh.ID))
							}
						}
					}
				}
				return jm.Exited(0) != nil
			})
			tail := launch.LogTail(jm.Procs[0].LogPath, 2)
			switch {
			case !exited:
				t.Fatalf("the joiner with another job's spec still runs after 60 s: %s", tail)
			case !strings.Contains(tail, "spec") && !strings.Contains(tail, "paradigm"):
				t.Fatalf("the joiner exited, not for its spec: %s", tail)
			}
			t.Logf("refused joiner (a gossip member meanwhile: %v): %s", member, tail)
			moved := 0
			for shard, i := range Leaders(c.Statuses()) {
				if leaders[shard] != "" && c.Statuses()[i].Node != leaders[shard] {
					moved++
				}
			}
			if moved > 0 {
				got = append(got, fmt.Sprintf("the leaders of %d of %d shards moved while it joined", moved, len(leaders)))
			}
			return append(got, trainsOn(c, 5, 30*time.Second)...)
		}},
		{name: "shm-squat", fixed: true, run: func(t *testing.T, c *Cluster, h *Hostile) []string {
			// Another Unix user (uid 65534) creates, in /dev/shm, the
			// shared-memory file a node would make for its trainer under
			// the name earlier builds gave it (a hash of the socket's
			// path); the node's PyTorch trainer must still attach.
			if os.Geteuid() != 0 {
				t.Skip("not root: cannot create a file as another user")
			}
			if fi, err := os.Stat("/dev/shm"); err != nil || !fi.IsDir() {
				t.Skip("no /dev/shm")
			}
			ext := newCluster(t, c.Mesh.Binary, 1, []string{"--threads", "1", "--eval-every", "5s", "--log-level", "warn", "--trainer", "external"},
				[]string{"--model", "external", "--paradigm", "dssp", "--s-lower", "3", "--r-max", "12"})
			tr := newPyTrainers(t, ext)
			sock := ext.Mesh.Procs[0].TrainerSocket()
			hash := fnv.New64a()
			hash.Write([]byte(sock))
			squatted := filepath.Join("/dev/shm", fmt.Sprintf("dssp-trainer-%016x.shm", hash.Sum64()))
			if err := os.WriteFile(squatted, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Remove(squatted) })
			if err := os.Chown(squatted, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			ext.Start(0)
			tr.Start(0, "examples/pytorch/mnist_mlp.py", "--eval-samples", "500")
			if waitUntil(90*time.Second, func() bool { return ext.Iter(0) > 0 }) {
				t.Logf("the trainer attached and trains beside %s (uid 65534)", squatted)
				return nil
			}
			return []string{fmt.Sprintf("the trainer never attached with %s taken by uid 65534: %s", squatted, launch.LogTail(tr.logs[0], 3))}
		}},
	}
}
