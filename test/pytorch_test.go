package test

import (
	"encoding/json"
	"math"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPyTorchTrainersMesh is issue 36's product path with real processes:
// three dssp nodes with --trainer external, each with a PyTorch trainer
// (examples/pytorch/mnist_mlp.py) attached, train the MNIST MLP to 95 %;
// one node and its trainer are killed with SIGKILL, the others train on;
// the node restarted on its data dir refuses a trainer whose model differs
// (naming the tensor), takes its own trainer back and trains; the exported
// snapshot loaded into the PyTorch model reproduces the accuracy the mesh
// reported for it.
func TestPyTorchTrainersMesh(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	c := NewCluster(t, 3,
		[]string{"--threads", "1", "--eval-every", "2s", "--log-level", "warn", "--trainer", "external"},
		[]string{"--model", "external", "--paradigm", "dssp", "--s-lower", "3", "--r-max", "12"})
	tr := newPyTrainers(t, c)
	// The evaluating trainer stops training while it evaluates: 2000 test
	// samples keep that short on a loaded 2-core box.
	const script, evalSamples = "examples/pytorch/mnist_mlp.py", "2000"
	trainerArgs := []string{"--eval-samples", evalSamples}
	// The first trainer fixes the job's layout; the others join it.
	c.Start(0)
	tr.Start(0, script, trainerArgs...)
	c.WaitFor("node0's trainer attached and training", 60*time.Second, func() bool { return c.Iter(0) > 0 })
	for _, i := range []int{1, 2} {
		c.Start(i)
		tr.Start(i, script, trainerArgs...)
	}
	c.WaitFor("3 members, every trainer training", 60*time.Second, func() bool {
		for i, s := range c.Statuses() {
			if s == nil || len(s.Members) != 3 || s.Worker == nil || s.Worker.Iter < 5 || !tr.Alive(i) {
				return false
			}
		}
		return true
	})
	took := c.WaitFor("the mesh's accuracy at 95 %", 150*time.Second, func() bool {
		a := Accuracy(c.Statuses())
		return a != nil && a.Accuracy >= 0.95
	})
	t.Logf("95 %% after %v; accuracy %.4f", took.Round(time.Second), Accuracy(c.Statuses()).Accuracy)

	// kill -9 of node 1 with its trainer: the others train on.
	const victim = 1
	deadID := c.Statuses()[victim].Node
	before := map[int]int64{0: c.Iter(0), 2: c.Iter(2)}
	c.Kill(victim)
	tr.Kill(victim)
	c.WaitFor("survivors 20 iterations further after the kill", 60*time.Second, func() bool {
		return c.Iter(0) >= before[0]+20 && c.Iter(2) >= before[2]+20
	})

	c.Restart(victim)
	t.Run("layout mismatch refused", func(t *testing.T) {
		cmd := tr.command(victim, "-c", `
import sys, dsspmesh
sys.path.insert(0, "examples/pytorch")
from mnist_mlp import MLP
try:
    dsspmesh.Optimizer(dsspmesh.connect(timeout=30), MLP(hidden=(128, 128)))
except dsspmesh.LayoutRefused as e:
    print("refused:", e.tensor, "|", e)
    sys.exit(0)
sys.exit("attached with another model's layout")
`)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("trainer with a 128-wide fc1: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "refused: fc1.weight |") {
			t.Fatalf("want the refusal to name fc1.weight, got %s", out)
		}
		t.Logf("%s", strings.TrimSpace(string(out)))
	})
	tr.Start(victim, script, trainerArgs...)
	c.WaitFor("the restarted pair trains again and is back in the clock tables", 90*time.Second, func() bool { return c.Rejoined(victim, deadID, 10) })

	t.Run("export reloads in PyTorch", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "model.safetensors")
		exp := exec.Command(c.Mesh.Binary, "export", "--node", c.Mesh.Procs[0].HTTP, "--evaluated", "--out", out)
		if b, err := exp.CombinedOutput(); err != nil {
			t.Fatalf("dssp export --evaluated: %v\n%s", err, b)
		}
		tr.KillAll(c)
		b, err := tr.command(0, script, "--eval-samples", evalSamples, "--evaluate", out).CombinedOutput()
		if err != nil {
			t.Fatalf("mnist_mlp.py --evaluate: %v\n%s", err, b)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		var r struct {
			Accuracy float64  `json:"accuracy"`
			Reported *float64 `json:"reported"`
		}
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil || r.Reported == nil {
			t.Fatalf("mnist_mlp.py --evaluate printed %s (%v)", b, err)
		}
		if math.Abs(r.Accuracy-*r.Reported) > 0.001 {
			t.Fatalf("the exported snapshot evaluates to %.4f in PyTorch, the mesh reported %.4f", r.Accuracy, *r.Reported)
		}
		t.Logf("exported snapshot: %.4f in PyTorch, %.4f reported by the mesh", r.Accuracy, *r.Reported)
	})
}
