package test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
	"go.etcd.io/bbolt"

	"dsspmesh/mesh"
	"dsspmesh/node/eval"
	"dsspmesh/node/launch"
	"dsspmesh/node/records"
	"dsspmesh/node/status"
	"dsspmesh/nodeclient"
	"dsspmesh/shardapi"
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
		{name: "raft-entry-flip", fixed: true, run: func(t *testing.T, c *Cluster, h *Hostile) []string {
			// One byte flipped in a push entry of a stopped replica's
			// raft.db, past its newest snapshot (so it applies it again at
			// its restart): it must say it diverged within a check period,
			// stop voting, be rebuilt, and the replicas agree after. A
			// replica that has just taken or installed a snapshot has no
			// push entry past it: it trains on and is stopped again. The
			// victim is a follower placed on shard 0: earlier cases leave
			// key-holding members in gossip, which placement counts, so
			// node2 may not be.
			victim := placedFollower(t, c, 0)
			dir := filepath.Join(c.Mesh.Procs[victim].DataDir, "shards", "0")
			var at uint64
			for try := 1; at == 0; try++ {
				c.Kill(victim)
				at = flipPushEntryAfter(t, filepath.Join(dir, "raft.db"), newestSnapshotIndex(t, dir))
				if at == 0 {
					if try == 5 {
						t.Fatalf("node%d's raft.db held no push entry past its newest snapshot at 5 stops", victim)
					}
					t.Logf("no push entry past node%d's newest snapshot; it trains on and is stopped again", victim)
					c.Restart(victim)
					trainsOn(c, int64(5*try), 30*time.Second)
				}
			}
			t.Logf("flipped a byte of the push entry at index %d of node%d's raft.db", at, victim)
			restart := time.Now()
			c.Restart(victim)
			return diverged(t, c, victim, restart)
		}},
		{name: "snapshot-meta-tamper", fixed: true, run: func(t *testing.T, c *Cluster, h *Hostile) []string {
			// One digit of a stopped replica's newest snapshot's meta.json
			// (its Index, +10): the replica must not start on it silently.
			// This build refuses the node's start naming the file and the
			// remedy; the remedy applied (the shard folder removed), the
			// node rejoins and the replicas agree.
			victim := placedFollower(t, c, 0)
			dir := filepath.Join(c.Mesh.Procs[victim].DataDir, "shards", "0")
			c.WaitFor(fmt.Sprintf("a snapshot of shard 0 on node%d", victim), 3*time.Minute, func() bool {
				m, _ := filepath.Glob(filepath.Join(dir, "snapshots", "*", "meta.json"))
				return len(m) > 0
			})
			c.Kill(victim)
			meta := filepath.Join(newestSnapshotDir(t, dir), "meta.json")
			b, err := os.ReadFile(meta)
			if err != nil {
				t.Fatal(err)
			}
			var m struct{ Index uint64 }
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			old, tampered := fmt.Sprintf(`"Index":%d`, m.Index), fmt.Sprintf(`"Index":%d`, m.Index+10)
			if err := os.WriteFile(meta, []byte(strings.Replace(string(b), old, tampered, 1)), 0o600); err != nil {
				t.Fatal(err)
			}
			t.Logf("node%d's snapshot meta.json: Index %d → %d", victim, m.Index, m.Index+10)
			restart := time.Now()
			if err := c.Mesh.Start(victim); err != nil {
				t.Fatal(err)
			}
			refused := waitUntil(30*time.Second, func() bool { return c.Mesh.Exited(victim) != nil })
			if !refused {
				// It started on the tampered snapshot: what did it do?
				return diverged(t, c, victim, restart)
			}
			tail := launch.LogTail(c.Mesh.Procs[victim].LogPath, 3)
			t.Logf("node%d refused to start: %s", victim, tail)
			if !strings.Contains(tail, "meta.json") || !strings.Contains(tail, "remove "+dir) {
				return []string{"node refused to start without naming meta.json and the remedy: " + tail}
			}
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			c.Restart(victim)
			return rejoinedAndAgree(t, c, victim, time.Now())
		}},
		{name: "fresh-legacy-id", fixed: true, run: func(t *testing.T, c *Cluster, h *Hostile) []string {
			// A member under a legacy id of its choosing ("0evil", which
			// sorts before every node id), never pinned by this mesh: it
			// gossips that it trains and asks shard 0 to add it as a
			// worker, under a certificate of a fresh key (an earlier
			// build's kind) and under a lifelong one. Before, the first
			// key it showed was pinned to the id and it was a member like
			// any other; now every node refuses it in the handshake and
			// ignores its gossip.
			const id = "0evil"
			key, err := mesh.GenerateNodeKey()
			if err != nil {
				t.Fatal(err)
			}
			lifelong, err := h.sec.NodeWithKey(id, key)
			if err != nil {
				t.Fatal(err)
			}
			oneStart := h.As(id)
			withKey := &Hostile{t: t, c: c, ID: id, sec: h.sec, log: h.log, tr: h.transportOf(lifelong)}
			t.Cleanup(func() { withKey.tr.Close() })
			if err := oneStart.TryJoin(true); err != nil {
				t.Logf("gossip join as %s: %v", id, err)
			}
			// The two add-workers and the watch of every node's member list
			// run at once: each is a wait a refused attack runs out.
			var (
				mu  sync.Mutex
				got []string
				wg  sync.WaitGroup
			)
			note := func(s string) { mu.Lock(); got = append(got, s); mu.Unlock() }
			for _, e := range []*Hostile{oneStart, withKey} {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), refusalWait)
					defer cancel()
					if _, err := e.Client(0).AddWorker(ctx, 0); err == nil {
						note(fmt.Sprintf("shard 0 added %s as a worker", id))
					} else {
						t.Logf("add-worker as %s: %v", id, err)
					}
				})
			}
			waitUntil(refusalWait, func() bool {
				for _, s := range c.Statuses() {
					if s != nil && slices.ContainsFunc(s.Members, func(m status.MemberStatus) bool { return m.ID == id }) {
						note(fmt.Sprintf("%s lists %s as a member", s.Node, id))
						return true
					}
				}
				return false
			})
			wg.Wait()
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
					for _, m := range s.Members { // the hostile member too, where an earlier case gossiped it in
						known[m.ID] = true
					}
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
			// Another Unix user (uid 65534) takes, in /dev/shm, the name
			// earlier builds gave the trainer's shared-memory file (a hash
			// of the socket's path); the node's PyTorch trainer must still
			// attach. The squat is a directory holding a file: the nodes
			// here run as root, which removes another user's plain file
			// in the sticky /dev/shm, so a plain file stops only a node run
			// by a user, as in issue 48's probe; a non-empty directory
			// stops the earlier builds whoever runs them.
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
			inside := filepath.Join(squatted, "x")
			if err := os.Mkdir(squatted, 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(squatted) })
			if err := os.WriteFile(inside, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{squatted, inside} {
				if err := os.Chown(p, 65534, 65534); err != nil {
					t.Fatal(err)
				}
			}
			ext.Start(0)
			tr.Start(0, "examples/pytorch/mnist_mlp.py", "--eval-samples", "500")
			if waitUntil(90*time.Second, func() bool { return ext.Iter(0) > 0 }) {
				t.Logf("the trainer attached and trains beside %s (uid 65534)", squatted)
				return nil
			}
			return []string{fmt.Sprintf("the trainer never attached with %s taken by uid 65534: %s", squatted, launch.LogTail(tr.logs[0], 3))}
		}},
		{name: "forged-evaluated-export", fixed: true, run: forgedEvaluatedExport},
		{name: "equivocating-evaluator", fixed: true, run: equivocatingEvaluator},
		{name: "lying-evaluator", fixed: true, run: lyingEvaluator},
	}
}

// forgedEvaluatedExport: a member whose self-certifying id sorts first
// becomes the evaluator (a worker of shard 0 with a push applied), claims
// an evaluation, signed and recorded in shard 0, of an honest snapshot's
// bytes and serves another file: one parameter byte changed. `dssp export
// --evaluated` through an honest node must not write it: the node hashes
// the bytes as they pass and cuts the response before its last part,
// logging both digests.
func forgedEvaluatedExport(t *testing.T, c *Cluster, h *Hostile) []string {
	node := c.Mesh.Procs[1]
	honest, forged := honestAndForged(t, c)
	e, claim, leave := becomeEvaluator(t, c, h, nodeclient.Digest(honest))
	defer leave()
	cb, err := json.Marshal(claim)
	if err != nil {
		t.Fatal(err)
	}
	e.ServeEvaluated(forged, cb)
	got := exportEvaluated(t, c, forged, func(logs []byte) string {
		served := nodeclient.Digest(forged)
		if !(bytes.Contains(logs, []byte("evaluated model refused")) && bytes.Contains(logs, []byte(served)) && bytes.Contains(logs, []byte(claim.Digest))) {
			return fmt.Sprintf("node%d's log names not both digests (%s served, %s claimed)", node.Index, served, claim.Digest)
		}
		return ""
	})
	// Once the member leaves shard 0's gate, every worker trains on.
	leave()
	return append(got, trainsOn(c, 10, 30*time.Second)...)
}

// equivocatingEvaluator: the member that holds the evaluation lease
// records in shard 0 a claim of an honest snapshot's bytes, then serves
// another file with a second claim, signed, for the same evaluation,
// naming that file's digest (and the same accuracy): the bytes match the
// claim sent with them. `dssp export --evaluated` through an honest node
// must refuse it: shard 0 recorded another digest for that sequence.
func equivocatingEvaluator(t *testing.T, c *Cluster, h *Hostile) []string {
	node := c.Mesh.Procs[1]
	honest, forged := honestAndForged(t, c)
	e, claim, leave := becomeEvaluator(t, c, h, nodeclient.Digest(honest))
	defer leave()
	second := claim
	second.Digest, second.Sig = nodeclient.Digest(forged), nil
	eval.SignClaim(e.Key, &second)
	cb, err := json.Marshal(second)
	if err != nil {
		t.Fatal(err)
	}
	e.ServeEvaluated(forged, cb)
	got := exportEvaluated(t, c, forged, func(logs []byte) string {
		want := fmt.Sprintf("shard 0 recorded its claim of sequence %d with digest %s", claim.Seq, claim.Digest)
		if !bytes.Contains(logs, []byte(want)) {
			return fmt.Sprintf("node%d's log does not say %q", node.Index, want)
		}
		return ""
	})
	leave()
	return append(got, trainsOn(c, 10, 30*time.Second)...)
}

// lyingEvaluator: the member that holds the lease claims accuracy 0.99,
// signed and recorded in shard 0, for a model file whose parameters are
// all zero (it scores one class in ten), serves that file and sends the
// claim to every node once a second. At --audit-fraction 1 (the suite's
// mesh) another member re-evaluates about every claim: some node must
// raise the alarm — an eval-audit-disagrees event naming the member
// and a /status warning — within 60 s.
func lyingEvaluator(t *testing.T, c *Cluster, h *Hostile) []string {
	honest, _ := honestAndForged(t, c)
	zero := slices.Clone(honest)
	clear(zero[8+binary.LittleEndian.Uint64(zero[:8]):]) // every tensor's bytes
	e, claim, leave := becomeEvaluator(t, c, h, nodeclient.Digest(zero))
	defer leave()
	cb, err := json.Marshal(claim)
	if err != nil {
		t.Fatal(err)
	}
	e.ServeEvaluated(zero, cb)
	var sent map[string]any
	if err := json.Unmarshal(cb, &sent); err != nil {
		t.Fatal(err)
	}
	alarm := ""
	for end := time.Now().Add(60 * time.Second); time.Now().Before(end) && alarm == ""; {
		e.EvalAll(maps.Clone(sent))
		waitUntil(time.Second, func() bool {
			for _, s := range c.Statuses() {
				if s == nil || s.EvalAudits["disagree"] == 0 {
					continue
				}
				for _, ev := range s.Events {
					if ev.Kind == "eval-audit-disagrees" && ev.Node == string(e.ID) && slices.ContainsFunc(s.Warnings, func(w string) bool { return strings.Contains(w, "evaluation audit disagrees") }) {
						alarm = fmt.Sprintf("%s: %s", s.Node, ev.Detail)
						return true
					}
				}
			}
			return false
		})
	}
	leave()
	if alarm == "" {
		shown := Accuracy(c.Statuses())
		return []string{fmt.Sprintf("no node raised an alarm within 60 s of the claim of accuracy 0.99 for a model of zeros (shown: %+v)", shown)}
	}
	t.Logf("the alarm: %s", alarm)
	return trainsOn(c, 10, 30*time.Second)
}

// honestAndForged are a fresh snapshot's bytes from node1 and the same
// with an exponent bit of the last parameter flipped.
func honestAndForged(t *testing.T, c *Cluster) (honest, forged []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	honest, _, err := nodeclient.FetchModel(ctx, c.Mesh.Procs[1].HTTP, false, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	forged = slices.Clone(honest)
	forged[len(forged)-1] ^= 0x40
	return honest, forged
}

// becomeEvaluator makes the member that sorts first the evaluator: it
// says it trains and has a push applied in shard 0, until node1 names it;
// then it records in shard 0 its claim, signed, of accuracy 0.99 at the
// next sequence naming digest (a build before shard 0 recorded claims
// refuses the op: ignored), which it returns, for the caller to serve a
// file with. leave takes it out of the gate and the gossip (idempotent).
func becomeEvaluator(t *testing.T, c *Cluster, h *Hostile, digest string) (*Hostile, records.EvalResult, func()) {
	t.Helper()
	node := c.Mesh.Procs[1]
	e := h.FirstInOrder()
	cur := Accuracy(c.Statuses())
	claim := records.EvalResult{Accuracy: 0.99, Loss: 0.01, Samples: 500, At: time.Now(), By: string(e.ID), Iter: cur.Iter, Seq: cur.Seq + 1, Digest: digest}
	eval.SignClaim(e.Key, &claim)
	// Its gossip says it trains: the builds before the lease named the
	// live training member with the lowest id.
	e.JoinSayingItTrains()
	c.WaitFor("every node lists the member", 20*time.Second, func() bool {
		for _, s := range c.Statuses() {
			if s == nil || !slices.ContainsFunc(s.Members, func(m status.MemberStatus) bool { return m.ID == string(e.ID) }) {
				return false
			}
		}
		return true
	})
	e.StayInGate = true
	if _, addErr, out := e.Push(0, 0, HostilePush{Samples: 64}); addErr != nil || len(out) == 0 || !out[0].Accepted() {
		t.Fatalf("the member's push to shard 0: %v %+v", addErr, out)
	}
	left := false
	leave := func() {
		if left {
			return
		}
		left = true
		rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer rcancel()
		e.Client(0).RemoveWorker(rctx)
		e.mu.Lock()
		if e.ml != nil {
			e.ml.Leave(time.Second)
		}
		e.mu.Unlock()
	}
	if !waitUntil(20*time.Second, func() bool {
		s, err := c.Status(1)
		return err == nil && s.Evaluator == string(e.ID)
	}) {
		leave()
		t.Fatalf("node%d never named %s evaluator", node.Index, e.ID)
	}
	// It holds shard 0's lease now: its claim is recorded.
	rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer rcancel()
	if err := e.Client(0).Claim(rctx, shardapi.Claim{By: claim.By, Seq: claim.Seq, Iter: claim.Iter, Accuracy: claim.Accuracy,
		Loss: claim.Loss, Samples: int64(claim.Samples), Digest: claim.Digest}); err != nil && oldBinary() == "" {
		leave()
		t.Fatalf("the lease holder's claim not recorded in shard 0: %v", err)
	}
	return e, claim, leave
}

// exportEvaluated runs `dssp export --evaluated` through node1 and says
// what the attack achieved: the evaluator's forged file written, or, when
// refused, what judge finds wrong with node1's log ("": nothing; judged
// on this build only).
func exportEvaluated(t *testing.T, c *Cluster, forged []byte, judge func(logs []byte) string) []string {
	node := c.Mesh.Procs[1]
	out := filepath.Join(t.TempDir(), "evaluated.safetensors")
	b, err := exec.Command(c.Mesh.Binary, "export", "--evaluated", "--node", node.HTTP, "--out", out, "--timeout", "20s").CombinedOutput()
	if err == nil {
		w, _ := os.ReadFile(out)
		return []string{fmt.Sprintf("dssp export --evaluated through node%d wrote the evaluator's file (%d bytes, its own file byte for byte: %v), which its recorded claim does not name: %s",
			node.Index, len(w), bytes.Equal(w, forged), lastLine(string(b)))}
	}
	t.Logf("dssp export --evaluated through node%d: %s", node.Index, lastLine(string(b)))
	if _, err := os.Stat(out); err == nil {
		return []string{"dssp export failed but wrote a file"}
	}
	if oldBinary() != "" {
		return nil
	}
	logs, _ := os.ReadFile(node.LogPath)
	if why := judge(logs); why != "" {
		return []string{why}
	}
	t.Logf("node%d's log: %s", node.Index, lastMatch(string(logs), "evaluated model refused"))
	return nil
}

// lastMatch is the last line of s containing sub.
func lastMatch(s, sub string) string {
	lines := strings.Split(s, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], sub) {
			return lines[i]
		}
	}
	return ""
}

// newestSnapshotDir is the folder of the newest snapshot of the shard
// folder dir.
func newestSnapshotDir(t *testing.T, dir string) string {
	t.Helper()
	metas, _ := filepath.Glob(filepath.Join(dir, "snapshots", "*", "meta.json"))
	best, bestIdx := "", uint64(0)
	for _, p := range metas {
		if strings.HasSuffix(filepath.Dir(p), ".tmp") {
			continue // being written when the node was killed: raft never opens it (raftstore.Stores)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var m struct{ Index uint64 }
		if json.Unmarshal(b, &m) == nil && m.Index >= bestIdx {
			best, bestIdx = filepath.Dir(p), m.Index
		}
	}
	if best == "" {
		t.Fatalf("no snapshot in %s", dir)
	}
	return best
}

// newestSnapshotIndex is the index of the shard folder dir's newest
// snapshot, 0 without one.
func newestSnapshotIndex(t *testing.T, dir string) uint64 {
	metas, _ := filepath.Glob(filepath.Join(dir, "snapshots", "*", "meta.json"))
	if len(metas) == 0 {
		return 0
	}
	b, err := os.ReadFile(filepath.Join(newestSnapshotDir(t, dir), "meta.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct{ Index uint64 }
	json.Unmarshal(b, &m)
	return m.Index
}

// flipPushEntryAfter flips one byte of the gradient of the first push
// entry past index after in the closed log database path, as a bit
// flipped on disk inside a data page would (bbolt's structure stays
// whole), and returns the entry's index: 0 when there is none.
func flipPushEntryAfter(t *testing.T, path string, after uint64) uint64 {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var at uint64
	err = db.Update(func(tx *bbolt.Tx) error {
		logs := tx.Bucket([]byte("logs"))
		c := logs.Cursor()
		for k, v := c.Seek(binary.BigEndian.AppendUint64(nil, after+1)); k != nil; k, v = c.Next() {
			put := func(b []byte) error { return logs.Put(k, b) }
			if v == nil { // an entry stored in a bucket of its own
				sub := logs.Bucket(k)
				v, put = sub.Get([]byte("e")), func(b []byte) error { return sub.Put([]byte("e"), b) }
			}
			var l raft.Log
			if codec.NewDecoderBytes(v, &codec.MsgpackHandle{}).Decode(&l) != nil || l.Type != raft.LogCommand || len(l.Data) < 64 || l.Data[0] != entryPush {
				continue
			}
			off := bytes.Index(v, l.Data)
			if off < 0 {
				continue
			}
			b := bytes.Clone(v)
			b[off+len(l.Data)-6] ^= 0x40 // inside the last gradient value: off by orders of magnitude
			at = l.Index
			return put(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return at
}

// diverged waits for node victim, restarted at restart on a damaged
// store, to say it diverged (its /status: a shard's Diverged, or a
// replica-diverged event), then for it to be rebuilt and agree. It names
// what went otherwise: the damage unsaid, the replica not rebuilt, the
// replicas' states apart after.
func diverged(t *testing.T, c *Cluster, victim int, restart time.Time) []string {
	said := ""
	waitUntil(60*time.Second, func() bool {
		s, err := c.Status(victim)
		if err != nil {
			return false
		}
		for _, sh := range s.Shards {
			if sh.Diverged != "" {
				said = sh.Diverged
			}
		}
		for _, e := range s.Events {
			if e.Kind == "replica-diverged" {
				said = e.Detail
			}
		}
		return said != ""
	})
	if said == "" {
		got := []string{fmt.Sprintf("node%d said nothing of its damaged replica within 60 s of its restart", victim)}
		return append(got, statesApart(t, c, restart)...)
	}
	t.Logf("node%d said, %v after its restart: %s", victim, time.Since(restart).Round(100*time.Millisecond), said)
	return rejoinedAndAgree(t, c, victim, restart)
}

// placedFollower is the index of a node that placement names for shard
// and that follows its leader there, as the leader sees it.
func placedFollower(t *testing.T, c *Cluster, shard uint32) int {
	t.Helper()
	victim := -1
	c.WaitFor(fmt.Sprintf("a follower of shard %d that placement names", shard), 60*time.Second, func() bool {
		st := c.Statuses()
		for _, s := range st {
			if s == nil {
				continue
			}
			for _, sh := range s.Shards {
				if sh.ID != shard || sh.Local != "leader" {
					continue
				}
				for i, f := range st {
					if f != nil && f.Node != s.Node && slices.Contains(sh.Placement, f.Node) && slices.Contains(sh.Voters, f.Node) {
						victim = i
						return true
					}
				}
			}
		}
		return false
	})
	return victim
}

// rejoinedAndAgree waits until node victim is a voter again of every shard
// placement names it for (as it sees placement), and no replica of its
// says it diverged, then checks the replicas' state hashes recorded after
// since.
func rejoinedAndAgree(t *testing.T, c *Cluster, victim int, since time.Time) []string {
	var got []string
	ok := waitUntil(120*time.Second, func() bool {
		st := c.Statuses()
		v := st[victim]
		if v == nil {
			return false
		}
		placed := 0
		for _, sh := range v.Shards {
			if sh.Diverged != "" {
				return false
			}
			if !slices.Contains(sh.Placement, v.Node) {
				continue
			}
			placed++
			if sh.Local == "" || !slices.Contains(shardVoters(c, sh.ID), v.Node) {
				return false
			}
		}
		return placed > 0
	})
	if !ok {
		got = append(got, fmt.Sprintf("node%d not back as a voter of every shard placed on it within 120 s", victim))
	} else {
		t.Logf("node%d back as a voter of every shard placed on it, %v after", victim, time.Since(since).Round(100*time.Millisecond))
	}
	trainsOn(c, 20, 60*time.Second) // checkpoints past the rebuild
	return append(got, statesApart(t, c, since)...)
}

// statesApart reads the mesh's history and names the state-hash
// checkpoints recorded after since at which the replicas differ.
func statesApart(t *testing.T, c *Cluster, since time.Time) []string {
	h, err := ReadHistory(filepath.Join(c.Mesh.Dir, "history"))
	if err != nil {
		t.Fatalf("history: %v", err)
	}
	type at struct {
		shard uint32
		index uint64
	}
	hashes := map[at]map[string]string{}
	for _, r := range h.Records {
		if r.Kind == "apply" && r.Hash != "" && r.Nanos > since.UnixNano() {
			k := at{r.Shard, r.Index}
			if hashes[k] == nil {
				hashes[k] = map[string]string{}
			}
			hashes[k][r.Node] = r.Hash
		}
	}
	apart, compared := 0, 0
	for _, byNode := range hashes {
		if len(byNode) < 2 {
			continue
		}
		compared++
		first := ""
		for _, v := range byNode {
			if first == "" {
				first = v
			} else if v != first {
				apart++
				break
			}
		}
	}
	t.Logf("state hashes after %v: %d of %d checkpoints apart", since.Format(time.TimeOnly), apart, compared)
	if apart > 0 {
		return []string{fmt.Sprintf("the replicas hold different states at %d of %d checkpoints after the restart", apart, compared)}
	}
	return nil
}
