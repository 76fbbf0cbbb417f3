package test

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"dsspmesh/node/job"
)

// faultLogLevel is the nodes' log level in the fault tests: warn, or
// DSSP_FAULT_LOG_LEVEL (info shows raft's elections, for debugging).
func faultLogLevel() string {
	if l := os.Getenv("DSSP_FAULT_LOG_LEVEL"); l != "" {
		return l
	}
	return "warn"
}

// faultMesh is the mesh every fault scenario runs on: three trainers and a
// replica-only node (so a shard can lose a replica and keep a quorum of
// three), the MLP under DSSP with s_L = 3, r_max = 12 (s_U = 15), in four
// shards (the MLP's own default is one: a fault here also meets
// cross-shard alignment and leaders on several nodes).
// nanEvery > 0 gives trainer nanNode a flaky accelerator: every
// nanEvery-th gradient it computes is NaN (the hidden --fault-nan-every).
// DSSP_FAULT_JOB_FLAGS adds job flags (e.g. --balance=true: the same
// faults with the balance layer on; --pipeline=true: with the pipelined
// loop, the checkers then judging the gate by s_L − 1; --paradigm=ssp
// --s-lower=1: another gate, which the checkers judge by).
// job adds job flags before those. DSSP_FAULT_TRAINER=pytorch runs the
// same mesh with PyTorch trainers (faulttrainers_test.go): the job is --model
// external, each trainer node computes through its trainer process.
func faultMesh(t *testing.T, tags string, seed uint64, nanEvery int, jobFlags ...string) *FaultCluster {
	spec := append([]string{"--model", "mlp", "--paradigm", "dssp", "--s-lower", "3", "--r-max", "12", "--shards", "4"}, jobFlags...)
	spec = append(spec, strings.Fields(os.Getenv("DSSP_FAULT_JOB_FLAGS"))...)
	pytorch := pytorchFaults(t)
	if pytorch {
		spec = externalSpec(spec)
	}
	js := job.DefaultSpec()
	fs := pflag.NewFlagSet("job", pflag.ContinueOnError)
	js.BindFlags(fs)
	if err := fs.Parse(spec); err != nil {
		t.Fatalf("job flags %q: %v", spec, err)
	}
	c := NewFaultCluster(t, FaultOptions{Nodes: 4, ReplicaOnly: []int{3}, Policy: js.PolicyText(), Tags: tags, Seed: seed,
		Pipeline: js.Pipeline, Balance: js.Balance,
		Args: []string{"--threads", "1", "--eval-every", "3s", "--eval-samples", "1000", "--log-level", faultLogLevel(), "--pprof"},
		Spec: spec})
	if nanEvery > 0 {
		c.Mesh.AddArgs(nanNode, "--fault-nan-every", strconv.Itoa(nanEvery))
	}
	if pytorch {
		c.withTrainers()
		c.startWithTrainers()
		return c
	}
	for i := range c.Mesh.Procs {
		c.Start(i)
	}
	return c
}

// nanNode is the trainer of faultMesh whose gradients go NaN.
const nanNode = 1

// targetAccuracy is what the fast tier's MLP must reach by its end, flaky
// accelerator and faults included (a fault-free mesh passes 0.95 within
// two minutes).
const targetAccuracy = 0.9

// failures fails t with every stall, every node crash and every crash of
// c's trainers (DSSP_FAULT_TRAINER=pytorch).
func failures(t *testing.T, c *FaultCluster, crashes []Crash, stalls []Stall) {
	for _, st := range stalls {
		t.Errorf("stalled at %s: %s", st.At.Format(time.TimeOnly), st.Msg)
	}
	for _, cr := range c.trainerCrashes() {
		t.Errorf("trainer%d (%s) exited at %s: %s", cr.Node, cr.ID, cr.At.Format(time.TimeOnly), cr.Err)
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
	rep, err := h.Check(c.Policy, c.Pipeline)
	if err != nil {
		t.Fatal(err)
	}
	for k := range events {
		for _, v := range events[k].Victims {
			if v >= 0 && v < len(c.IDs) {
				events[k].VictimIDs = append(events[k].VictimIDs, c.IDs[v])
			}
		}
	}
	Figures(h, events)
	t.Logf("figures:\n%s", FigureTable(events))
	t.Logf("workers out of a clock table:\n%s", RemovalSummary(Removals(h, events)))
	if a := Accuracy(c.Statuses()); a != nil {
		t.Logf("final accuracy %.3f at evaluator iteration %d", a.Accuracy, a.Iter)
	}
	for _, r := range rep.ShortRuns {
		t.Logf("global batch short: %s", r)
	}
	t.Logf("checkers: %s", rep)
	if !rep.OK() {
		for _, v := range rep.Violations {
			t.Error(v)
		}
	}
	if rep.Acked == 0 || rep.HashCompared == 0 || rep.Terms == 0 || rep.Replayed == 0 || rep.FiniteChecked == 0 || rep.Reads == 0 ||
		(c.Balance && rep.ShareRounds == 0) {
		t.Errorf("the checkers saw too little to judge: %s", rep)
	}
	return rep
}

// envDuration is the duration in the environment variable name, or def.
func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return d
}
