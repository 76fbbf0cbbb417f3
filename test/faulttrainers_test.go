package test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"
)

// The fault suite with PyTorch trainers (DSSP_FAULT_TRAINER=pytorch): every
// training node runs --trainer external with one trainer process beside it
// (examples/pytorch/mnist_mlp.py, started as `dssp up --trainer` starts
// one: the node's socket in DSSP_TRAINER_SOCKET), the bootstrap node's job
// is --model external, and the faults add kill -9 of a trainer alone and
// of a node with its trainer to the node faults. A trainer whose node dies
// waits for it (--reconnect) and attaches again when the node is back on
// its data dir.

// faultTrainerEnv selects the trainers of the fault suite: builtin (the
// default: the nodes' Go model) or pytorch.
const faultTrainerEnv = "DSSP_FAULT_TRAINER"

// pytorchFaults reports whether the fault suite runs with PyTorch
// trainers (DSSP_FAULT_TRAINER=pytorch).
func pytorchFaults(t testing.TB) bool {
	switch v := os.Getenv(faultTrainerEnv); v {
	case "", "builtin":
		return false
	case "pytorch":
		return true
	default:
		t.Fatalf("%s=%q: builtin or pytorch", faultTrainerEnv, v)
		return false
	}
}

// faultTrainerScript is the trainer every training node gets, and its
// arguments: it waits up to 10 minutes for its node to come back after
// the node died (a stall's recovery restarts every node within 4).
var faultTrainerScript = []string{"examples/pytorch/mnist_mlp.py", "--reconnect", "600", "--log-every", "30"}

// externalSpec is spec with its model replaced by --model external.
func externalSpec(spec []string) []string {
	out := slices.Clone(spec)
	for i := 0; i+1 < len(out); i++ {
		if out[i] == "--model" {
			out[i+1] = "external"
		}
	}
	return out
}

// withTrainers gives c's training nodes --trainer external and a trainer
// tender (before any node starts).
func (c *FaultCluster) withTrainers() {
	for _, i := range c.Trainers() {
		c.Mesh.AddArgs(i, "--trainer", "external")
	}
	tt := &trainerTender{py: newPyTrainers(c.t, c.Cluster), held: map[int]bool{}, last: map[int]time.Time{}}
	c.trainers = tt
	c.tend = func() { tt.tend(c) }
}

// pytorch is c's trainer tender (DSSP_FAULT_TRAINER=pytorch), nil when
// the nodes train the built-in model.
func (c *FaultCluster) pytorch() *trainerTender {
	tt, _ := c.trainers.(*trainerTender)
	return tt
}

// startWithTrainers starts every node and its trainer: the bootstrap node
// and its trainer first (the trainer's layout and initial parameters
// become the job's), then the others.
func (c *FaultCluster) startWithTrainers() {
	c.t.Helper()
	trains := func(i int) bool { return slices.Contains(c.Trainers(), i) }
	c.Start(0)
	if trains(0) {
		c.pytorch().py.Start(0, faultTrainerScript[0], faultTrainerScript[1:]...)
		c.WaitFor("node0's trainer attached and training", 2*time.Minute, func() bool { return c.Iter(0) > 0 })
	}
	for i := 1; i < len(c.Mesh.Procs); i++ {
		c.Start(i)
		if trains(i) {
			c.pytorch().py.Start(i, faultTrainerScript[0], faultTrainerScript[1:]...)
		}
	}
}

// trainerCrashes is the trainers that exited on their own with an error.
func (c *FaultCluster) trainerCrashes() []Crash {
	if c.pytorch() == nil {
		return nil
	}
	return c.pytorch().crashes
}

// KillTrainer kills node v's trainer alone with SIGKILL: the node must
// remove its worker from every shard's clock table at once while the other
// workers train on; then the trainer starts again, attaches and is re-added.
func (c *FaultCluster) KillTrainer(v int, limit time.Duration) Event {
	c.t.Helper()
	e := Event{Kind: "kill trainer", Victims: []int{v}, At: time.Now()}
	id := c.IDs[v]
	c.pytorch().held[v] = true
	c.pytorch().py.Kill(v)
	got := c.measure(e.Kind+": its worker removed, the others train on", limit, map[string]func() bool{
		"detect":  func() bool { return !c.listedBy(id) },
		"recover": c.progressed(without(c.Trainers(), v), 5),
	})
	e.Detect, e.Recover = got["detect"], got["recover"]
	e.End = time.Now()
	delete(c.pytorch().held, v)
	c.pytorch().py.Restart(v)
	c.WaitFor(e.Kind+": the trainer re-added", limit, func() bool { return c.Rejoined(v, id, 3) })
	c.WaitHealthy(e.Kind, 3, limit)
	return e
}

// KillTrainerAndNode kills node v and its trainer with SIGKILL, waits for
// the survivors to take over and move on, and restarts both: the node on
// its data dir, then the trainer.
func (c *FaultCluster) KillTrainerAndNode(v int, limit time.Duration) Event {
	c.t.Helper()
	e := Event{Kind: "kill node+trainer", Victims: []int{v}, At: time.Now()}
	c.pytorch().held[v] = true
	c.pytorch().py.Kill(v)
	c.Kill(v)
	c.afterDeath(&e, without(c.all(), v), limit)
	e.End = time.Now()
	c.Restart(v)
	delete(c.pytorch().held, v)
	c.pytorch().py.Restart(v)
	c.WaitHealthy(e.Kind, 3, limit)
	return e
}

// KillTrainersOrNodes is the fast tier's trainer faults: kill -9 of a node
// (its trainer waits and attaches again), of a trainer alone, and of both,
// in an order and on victims drawn from rng (the suite's seed).
func (c *FaultCluster) KillTrainersOrNodes(rng *rand.Rand, limit time.Duration) []Event {
	c.t.Helper()
	var out []Event
	for _, k := range rng.Perm(3) {
		out = append(out, c.killTrainerOrNode(k, c.Trainers()[rng.IntN(len(c.Trainers()))], limit))
	}
	return out
}

// killTrainerOrNode is fault k on victim v: 0 its node, 1 its trainer, 2
// both.
func (c *FaultCluster) killTrainerOrNode(k, v int, limit time.Duration) Event {
	c.t.Helper()
	switch k {
	case 0:
		return c.killThenRestart("kill node (its trainer waits)", v, limit)
	case 1:
		return c.KillTrainer(v, limit)
	case 2:
		return c.KillTrainerAndNode(v, limit)
	}
	panic(fmt.Sprintf("trainer fault %d", k))
}
