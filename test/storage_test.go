package test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// damagedShard is the shard whose raft.db the storage test damages.
const damagedShard = 0

// committed is one shard's committed state as the mesh reports it: the
// highest applied index and the highest term any replica shows.
type committed struct{ applied, term uint64 }

func (c *FaultCluster) committedState() map[uint32]committed {
	out := map[uint32]committed{}
	for _, s := range c.Statuses() {
		if s == nil {
			continue
		}
		for _, sh := range s.Shards {
			if sh.Local == "" {
				continue
			}
			cs := out[sh.ID]
			cs.applied, cs.term = max(cs.applied, sh.Applied), max(cs.term, sh.Term)
			out[sh.ID] = cs
		}
	}
	return out
}

// raftDB is node i's log database of shard s.
func (c *FaultCluster) raftDB(i int, s uint32) string {
	return filepath.Join(c.shardDir(i, s), "raft.db")
}

func (c *FaultCluster) shardDir(i int, s uint32) string {
	return filepath.Join(c.Mesh.Procs[i].DataDir, "shards", fmt.Sprint(s))
}

// damage truncates node i's raft.db of shard s to half its length, or
// empties it (zero), and returns its bytes afterwards.
func (c *FaultCluster) damage(i int, s uint32, zero bool) []byte {
	c.t.Helper()
	path := c.raftDB(i, s)
	fi, err := os.Stat(path)
	if err != nil {
		c.t.Fatal(err)
	}
	size := fi.Size() / 2
	if zero {
		size = 0
	}
	if err := os.Truncate(path, size); err != nil {
		c.t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		c.t.Fatal(err)
	}
	return b
}

// startRefused starts node i, which must refuse: exit non-zero within 30 s
// with one message naming its raft.db of shard s, the problem and the
// remedy, and leave the damaged file as it was. It returns the message.
func (c *FaultCluster) startRefused(i int, s uint32, problem string, damaged []byte) string {
	c.t.Helper()
	c.killed[i] = true // its exit is expected: WaitFor must not fail on it
	if err := c.Mesh.Start(i); err != nil {
		c.t.Fatal(err)
	}
	c.WaitFor(fmt.Sprintf("node%d to refuse its start", i), 30*time.Second, func() bool { return !c.Mesh.Procs[i].Alive() })
	exit := c.Mesh.Exited(i)
	if exit == nil || !strings.Contains(exit.Error(), "exit status 1") {
		c.t.Fatalf("node%d on a damaged raft.db: %v, want exit status 1", i, exit)
	}
	log, err := os.ReadFile(c.Mesh.Procs[i].LogPath)
	if err != nil {
		c.t.Fatal(err)
	}
	var msg string // the last error line the command printed
	for _, line := range strings.Split(string(log), "\n") {
		if strings.HasPrefix(line, "dssp: ") {
			msg = line
		}
	}
	path, dir := c.raftDB(i, s), c.shardDir(i, s)
	for _, want := range []string{
		"dssp: --data-dir " + c.Mesh.Procs[i].DataDir + ": the node does not start: ",
		fmt.Sprintf("shard %d: log store %s %s", s, path, problem),
		"remove " + dir + " to have this node rejoin the shard as a fresh replica that catches up from its peers",
	} {
		if !strings.Contains(msg, want) {
			c.t.Fatalf("node%d's refusal %q: want it to say %q", i, msg, want)
		}
	}
	if b, err := os.ReadFile(path); err != nil || !slices.Equal(b, damaged) {
		c.t.Fatalf("node%d's refused start changed %s (%v)", i, path, err)
	}
	return msg
}

// sharedHashes counts the indices of shard s past after at which node
// recorded its replica's state hash and another node did too.
func sharedHashes(h *History, node string, s uint32, after uint64) int {
	by := map[uint64]map[string]bool{}
	for _, r := range h.Records {
		if r.Kind == "apply" && r.Hash != "" && r.Shard == s && r.Index > after {
			if by[r.Index] == nil {
				by[r.Index] = map[string]bool{}
			}
			by[r.Index][r.Node] = true
		}
	}
	n := 0
	for _, nodes := range by {
		if nodes[node] && len(nodes) > 1 {
			n++
		}
	}
	return n
}

// TestDamagedRaftDBRefusesTheStartAndTheRemedyRejoins is a damaged disk
// end to end on a 3-node mesh that trains (every shard on every node):
//
//   - one replica: a node is killed and its raft.db of shard 0 truncated
//     to half (then, on another node, emptied). Restarted, the node
//     refuses its whole start (exit status 1) with one message naming the
//     file, the problem and the remedy. The remedy followed (the shard
//     folder removed), it rejoins, its replica catches up past the
//     committed state recorded before the kill (applied index and term),
//     and training goes on;
//   - every replica: all three stopped and each one's raft.db of shard 0
//     damaged, every node refuses to start, naming its own file; none
//     starts the shard from an empty log or rolls it back.
//
// Every checker runs over the history: no acknowledged push lost, the
// replicas' state hashes agree, the rejoined ones' included (the test
// waits until each has recorded one a peer recorded too).
func TestDamagedRaftDBRefusesTheStartAndTheRemedyRejoins(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	c := NewFaultCluster(t, FaultOptions{Nodes: 3, Policy: "dssp:3:12", Seed: 1,
		Args: []string{"--threads", "1", "--eval-every", "3s", "--eval-samples", "500", "--log-level", "warn"},
		Spec: []string{"--model", "mlp", "--paradigm", "dssp", "--s-lower", "3", "--r-max", "12", "--shards", "2"}})
	all := []int{0, 1, 2}
	for _, i := range all {
		c.Start(i)
	}
	c.WaitMembers("3 members", all, all, 60*time.Second)
	c.WaitProgress("every worker training", all, 20, 60*time.Second)

	for _, step := range []struct {
		victim  int
		zero    bool
		problem string
	}{
		{1, false, "is damaged: truncated: the file is "},
		{2, true, "is empty"},
	} {
		before := c.committedState()
		acked := c.Check().Acked
		c.Kill(step.victim)
		damaged := c.damage(step.victim, damagedShard, step.zero)
		msg := c.startRefused(step.victim, damagedShard, step.problem, damaged)
		t.Logf("node%d refused: %s", step.victim, msg)

		// The remedy: remove the shard folder; the node rejoins as a fresh
		// replica of the shard and catches up from its peers.
		if err := os.RemoveAll(c.shardDir(step.victim, damagedShard)); err != nil {
			t.Fatal(err)
		}
		c.Restart(step.victim)
		took := c.WaitFor(fmt.Sprintf("node%d's fresh replica of shard %d past the committed state %+v", step.victim, damagedShard, before[damagedShard]),
			60*time.Second, func() bool {
				s, err := c.Status(step.victim)
				if err != nil {
					return false
				}
				for _, sh := range s.Shards {
					if sh.ID == damagedShard {
						return sh.Local != "" && sh.Applied > before[sh.ID].applied && sh.Term >= before[sh.ID].term
					}
				}
				return false
			})
		c.WaitProgress(fmt.Sprintf("node%d training again", step.victim), []int{step.victim}, 5, 60*time.Second)
		// The fresh replica's state is compared with its peers' at an index
		// past the committed state (the hash checker: equal, or a violation).
		c.WaitFor(fmt.Sprintf("a state hash of node%d's fresh replica that a peer also recorded", step.victim), 30*time.Second, func() bool {
			h, err := ReadHistory(c.HistoryDir)
			return err == nil && sharedHashes(h, c.IDs[step.victim], damagedShard, before[damagedShard].applied) > 0
		})
		after := c.committedState()
		for s, b := range before {
			if a := after[s]; a.applied < b.applied || a.term < b.term {
				t.Errorf("shard %d went back: applied %d term %d before the damage, %d %d after", s, b.applied, b.term, a.applied, a.term)
			}
		}
		rep := c.Check()
		t.Logf("node%d caught up in %v; shard %d %+v before → %+v; checkers: %s", step.victim, took.Round(100*time.Millisecond),
			damagedShard, before[damagedShard], after[damagedShard], rep)
		if !rep.OK() {
			t.Fatalf("checkers after node%d rejoined: %v", step.victim, rep.Violations)
		}
		if rep.Acked <= acked {
			t.Errorf("no push acknowledged after node%d rejoined: %d before, %d after", step.victim, acked, rep.Acked)
		}
	}

	// Every replica damaged: nothing holds the shard any more, and no node
	// starts on what is left.
	before := c.committedState()
	for _, i := range all {
		c.Kill(i)
	}
	rep := c.Check()
	t.Logf("before damaging every replica: shard %d %+v; checkers: %s", damagedShard, before[damagedShard], rep)
	if !rep.OK() || rep.Acked == 0 || rep.HashCompared == 0 {
		t.Fatalf("checkers: %s %v", rep, rep.Violations)
	}
	damaged := map[int][]byte{}
	for _, i := range all {
		damaged[i] = c.damage(i, damagedShard, i == 1)
	}
	for _, i := range all {
		problem := "is damaged: truncated"
		if i == 1 {
			problem = "is empty"
		}
		t.Logf("node%d refused: %s", i, c.startRefused(i, damagedShard, problem, damaged[i]))
	}
}
