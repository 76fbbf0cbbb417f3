package test

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// faultMesh is the mesh every fault scenario runs on: three trainers and a
// replica-only node (so a shard can lose a replica and keep a quorum of
// three), the MLP under DSSP with s_L = 3, r_max = 12 (s_U = 15).
func faultMesh(t *testing.T, tags string, seed uint64) *FaultCluster {
	c := NewFaultCluster(t, FaultOptions{Nodes: 4, ReplicaOnly: []int{3}, Policy: "dssp:3:12", Tags: tags, Seed: seed,
		Args: []string{"--threads", "1", "--eval-every", "3s", "--eval-samples", "1000", "--log-level", "warn"},
		Spec: []string{"--model", "mlp", "--paradigm", "dssp", "--s-lower", "3", "--r-max", "12"}})
	for i := range c.Mesh.Procs {
		c.Start(i)
	}
	return c
}

// TestFaults is the fast tier of the fault-injection suite: one mesh of real
// processes goes through every fault in turn — kill -9 of a shard leader,
// of a worker, of a follower restarted at once; SIGSTOP of a leader past
// the election timeout; a minority partition; the leader and a follower
// cut off together; a lossy network; a node with the wrong key trying to
// join; a rolling restart; every node killed and restarted — and must be
// healthy after each. Then every checker runs over the nodes' history.
func TestFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	const limit = 3 * time.Minute
	c := faultMesh(t, "", 1)
	// A crash or a stall fails the test at the end, after every scenario
	// ran, so one run reports them all with the figures.
	crashes, stalls := c.ReplaceCrashed(), c.RecoverStalls()
	c.WaitHealthy("warm-up", 10, limit)

	steps := []struct {
		name string
		run  func() []Event
	}{
		{"kill-leader", func() []Event { return []Event{c.KillLeader(limit)} }},
		{"kill-worker", func() []Event { return []Event{c.KillWorker(limit)} }},
		{"kill-restart", func() []Event { return []Event{c.KillRestart(limit)} }},
		{"pause-leader", func() []Event { return []Event{c.PauseLeader(3*time.Second, limit)} }},
		{"partition-minority", func() []Event { return []Event{c.PartitionMinority(c.idleTrainer(), 8*time.Second, limit)} }},
		{"partition-leader-follower", func() []Event { return []Event{c.PartitionLeaderFollower(8*time.Second, limit)} }},
		{"lossy", func() []Event { return []Event{c.Lossy(8*time.Second, limit)} }},
		{"wrong-key", func() []Event { return []Event{c.WrongKeyJoin(limit)} }},
		{"rolling-restart", func() []Event { return c.RollingRestart(limit) }},
		{"kill-all", func() []Event { return []Event{c.KillAll(limit)} }},
	}
	// DSSP_FAULT_STEPS=a,b runs only the steps named (for debugging one).
	only := os.Getenv("DSSP_FAULT_STEPS")
	var events []Event
	for _, s := range steps {
		if only != "" && !slices.Contains(strings.Split(only, ","), s.name) {
			continue
		}
		for _, e := range s.run() {
			t.Logf("%s %v: detect %v, elect %v, recover %v", e.Kind, e.Victims, e.Detect, e.Elect, e.Recover)
			events = append(events, e)
		}
	}
	c.WaitHealthy("the end", 3, limit)

	report(t, c, events)
	failures(t, *crashes, *stalls)
}

func failures(t *testing.T, crashes []Crash, stalls []Stall) {
	for _, st := range stalls {
		t.Errorf("stalled at %s: %s", st.At.Format(time.TimeOnly), st.Msg)
	}
	for _, cr := range crashes {
		t.Errorf("node%d (%s) crashed at %s: %s", cr.Node, cr.ID, cr.At.Format(time.TimeOnly), cr.Err)
	}
}

// report runs the checkers and prints the figures; any violation fails t.
func report(t *testing.T, c *FaultCluster, events []Event) *Report {
	h, err := ReadHistory(c.HistoryDir)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := h.Check(c.Policy)
	if err != nil {
		t.Fatal(err)
	}
	Figures(h, events)
	t.Logf("figures:\n%s", FigureTable(events))
	if a := Accuracy(c.Statuses()); a != nil {
		t.Logf("final accuracy %.3f at evaluator iteration %d", a.Accuracy, a.Iter)
	}
	t.Logf("checkers: %s", rep)
	if !rep.OK() {
		for _, v := range rep.Violations {
			t.Error(v)
		}
	}
	if rep.Acked == 0 || rep.HashCompared == 0 || rep.Terms == 0 || rep.Replayed == 0 {
		t.Errorf("the checkers saw too little to judge: %s", rep)
	}
	return rep
}
