package test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"dsspmesh/node/records"
	"dsspmesh/node/status"
)

// TestQuorumLossIsNamed runs three nodes with --replication 3 and kills
// two with SIGKILL: within 5 s the survivor's /status and `dssp status`
// name every shard that lost its quorum and the voters it waits for, and
// its events, /metrics and log say so too; a restarted voter brings the
// quorum back, which the survivor records once. --replication 2 is
// refused with the reason.
func TestQuorumLossIsNamed(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	t.Run("replication 2 is refused", func(t *testing.T) {
		got := runFail(t, 20*time.Second, nodeArgs(t, "", freePorts(t), "--replication", "2")...)
		if !strings.Contains(got, "--replication 2 is even") || !strings.Contains(got, "one kill freezes the shard") {
			t.Errorf("got %q, want the refusal naming --replication 2 and why", got)
		}
		t.Logf("dssp node --replication 2: %s", got)
	})

	const nodes, shards = 3, 2
	c := NewCluster(t, nodes, []string{"--train=false"}, []string{"--shards", fmt.Sprint(shards), "--replication", "3"})
	for i := range nodes {
		c.Start(i)
	}
	ids := make([]string, nodes)
	c.WaitFor("every shard with 3 voters and a leader on every node", 90*time.Second, func() bool {
		for i, s := range c.Statuses() {
			if s == nil || len(s.Shards) != shards {
				return false
			}
			ids[i] = s.Node
			for _, sh := range s.Shards {
				if len(sh.Voters) != nodes || sh.Leader == "" || sh.Quorum != "ok" {
					return false
				}
			}
		}
		return true
	})

	const survivor = 0
	want := []string{ids[1], ids[2]}
	slices.Sort(want)
	killed := time.Now()
	c.Kill(1)
	c.Kill(2)

	// Poll the survivor's /status and `dssp status` until both name every
	// shard lost and the voters it waits for.
	var statusAt, textAt time.Duration
	var last status.Status
	var text string
	c.WaitFor("the survivor's /status and dssp status name every shard's lost quorum", 30*time.Second, func() bool {
		if statusAt == 0 {
			if s, err := c.Status(survivor); err == nil {
				last = s
				if lostAll(s, shards, want) {
					statusAt = time.Since(killed)
				}
			}
		}
		if textAt == 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			out, err := exec.CommandContext(ctx, Binary(t), "status", "--node", c.Mesh.Procs[survivor].HTTP).CombinedOutput()
			cancel()
			text = string(out)
			if err == nil && textNamesLoss(text, shards, want) {
				textAt = time.Since(killed)
			}
		}
		return statusAt > 0 && textAt > 0
	})
	t.Logf("quorum loss named %v after the kill in /status, %v in dssp status (limit 5s)", statusAt.Round(time.Millisecond), textAt.Round(time.Millisecond))
	for _, sh := range last.Shards {
		t.Logf("/status shard %d: quorum %s, waiting for %v, no leader for %.1fs, voters %v", sh.ID, sh.Quorum, sh.WaitingFor, sh.LeaderlessSeconds, sh.Voters)
	}
	t.Logf("dssp status:\n%s", text)
	if statusAt > 5*time.Second || textAt > 5*time.Second {
		t.Errorf("quorum loss named after %v (/status) and %v (dssp status), want within 5s of the kill", statusAt, textAt)
	}

	// The event, the metric and the WARN line follow within a round of the
	// mesh view.
	c.WaitFor("a quorum-lost event per shard, dssp_shard_quorum_lost 1 and a WARN line naming the voters", 10*time.Second, func() bool {
		s, err := c.Status(survivor)
		if err != nil {
			return false
		}
		events := map[uint32]bool{}
		for _, e := range s.Events {
			if e.Kind == records.EventQuorumLost && e.Shard != nil && strings.Contains(e.Detail, strings.Join(want, ", ")) {
				events[*e.Shard] = true
			}
		}
		metrics := get(c.Mesh.Procs[survivor].HTTP + "/metrics")
		for sh := range shards {
			if !events[uint32(sh)] || !strings.Contains(metrics, fmt.Sprintf("dssp_shard_quorum_lost{shard=\"%d\"} 1", sh)) {
				return false
			}
		}
		log, _ := os.ReadFile(c.Mesh.Procs[survivor].LogPath)
		return slices.ContainsFunc(strings.Split(string(log), "\n"), func(l string) bool {
			return strings.Contains(l, "WARN") && strings.Contains(l, "lost its quorum") && strings.Contains(l, "waits for "+strings.Join(want, ", "))
		})
	})

	// Alone once membership declares the others failed: the survivor warns
	// that the mesh is smaller than the job's replication, in /status at
	// once and in its log once the count has held 5 s.
	tooSmall := "the mesh has 1 live member(s), fewer than the job's --replication 3"
	c.WaitFor("the survivor warns that the mesh is smaller than the replication", 30*time.Second, func() bool {
		s, err := c.Status(survivor)
		if err != nil || !slices.ContainsFunc(s.Warnings, func(w string) bool { return strings.HasPrefix(w, tooSmall) }) {
			return false
		}
		log, _ := os.ReadFile(c.Mesh.Procs[survivor].LogPath)
		return slices.ContainsFunc(strings.Split(string(log), "\n"), func(l string) bool {
			return strings.Contains(l, "WARN") && strings.Contains(l, tooSmall)
		})
	})
	t.Logf("mesh-too-small warning in /status and the log %v after the kill", time.Since(killed).Round(100*time.Millisecond))

	// A voter back: the shards elect a leader and the survivor records the
	// quorum regained, once per shard.
	c.Restart(1)
	c.WaitFor("every shard with a leader again and a quorum-regained event for each", 60*time.Second, func() bool {
		s, err := c.Status(survivor)
		if err != nil {
			return false
		}
		regained := map[uint32]int{}
		for _, e := range s.Events {
			if e.Kind == records.EventQuorumRegained && e.Shard != nil {
				regained[*e.Shard]++
			}
		}
		for _, sh := range s.Shards {
			if sh.Quorum != "ok" || regained[sh.ID] != 1 {
				return false
			}
		}
		last = s
		return true
	})
	for _, e := range last.Events {
		if e.Kind == records.EventQuorumLost || e.Kind == records.EventQuorumRegained {
			t.Logf("event %s %-15s %s", e.At.Format("15:04:05.000"), e.Kind, e.Detail)
		}
	}
}

// lostAll reports whether s names each of its shards lost, waiting for
// voters want, in its shard record and its warnings.
func lostAll(s status.Status, shards int, want []string) bool {
	if len(s.Shards) != shards {
		return false
	}
	for _, sh := range s.Shards {
		if sh.Quorum != "lost" || !slices.Equal(sh.WaitingFor, want) {
			return false
		}
		if !slices.ContainsFunc(s.Warnings, func(w string) bool {
			return strings.HasPrefix(w, fmt.Sprintf("shard %d lost its quorum", sh.ID)) && strings.Contains(w, "waits for "+strings.Join(want, ", "))
		}) {
			return false
		}
	}
	return true
}

// textNamesLoss reports whether `dssp status`'s output names each shard
// lost and the voters it waits for.
func textNamesLoss(text string, shards int, want []string) bool {
	for sh := range shards {
		if !slices.ContainsFunc(strings.Split(text, "\n"), func(l string) bool {
			return strings.HasPrefix(l, fmt.Sprintf("WARNING: shard %d lost its quorum", sh)) && strings.Contains(l, "waits for "+strings.Join(want, ", "))
		}) {
			return false
		}
	}
	return true
}

// get is the body of an HTTP GET ("" on any error).
func get(url string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+url, nil)
	if err != nil {
		return ""
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
