package test

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMeshStepsAsDDP is the combine rule's contract with real processes: 4
// PyTorch trainers through a 4-node mesh under bsp, one step a push, fp32
// on the wire, each stepping its own optimizer on the same batches as DDP's
// rank of its index (test/pytorch/equiv.py), against PyTorch DDP over gloo
// from the same initial parameters. After 50 steps the parameters agree:
// within float32 rounding for SGD and momentum SGD (the mean of the
// workers' changes is DDP's step), and within the stated tolerance for Adam
// (each worker's moments are its own, DDP's are of the mean gradient:
// docs/design.md, "The combine rule").
func TestMeshStepsAsDDP(t *testing.T) {
	longTest(t)
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	const script, steps = "test/pytorch/equiv.py", "50"
	for _, c := range []struct {
		opt            string
		maxAbs, maxRel float64 // the bound on the largest difference, and on it relative to the distance DDP moved
	}{
		{"sgd", 2e-6, 1e-4},
		{"momentum", 2e-6, 1e-4},
		{"adam", 0.1, 0.5},
	} {
		t.Run(c.opt, func(t *testing.T) {
			cl := NewCluster(t, 4,
				[]string{"--threads", "1", "--eval-every", "1h", "--log-level", "warn", "--trainer", "external"},
				[]string{"--model", "external", "--dataset", "mnist", "--paradigm", "bsp", "--wire-precision", "fp32"})
			tr := newPyTrainers(t, cl)
			barrier := t.TempDir()
			cl.Start(0)
			tr.Start(0, script, "mesh", "0", "--opt", c.opt, "--steps", steps, "--barrier", barrier)
			cl.WaitFor("node0's trainer attached", 90*time.Second, func() bool {
				s, err := cl.Status(0)
				return err == nil && s.Trainer != nil && s.Trainer.Attached
			})
			for i := 1; i < 4; i++ {
				cl.Start(i)
				tr.Start(i, script, "mesh", fmt.Sprint(i), "--opt", c.opt, "--steps", steps, "--barrier", barrier)
			}
			cl.WaitFor("every trainer's 50 steps", 180*time.Second, func() bool {
				for i := range 4 {
					done, err := tr.Exited(i)
					if done && err != nil {
						t.Fatalf("trainer %d: %v", i, err)
					}
					if !done {
						return false
					}
				}
				return true
			})
			dir := t.TempDir()
			meshFile, ddpFile := filepath.Join(dir, "mesh.safetensors"), filepath.Join(dir, "ddp.safetensors")
			if b, err := exec.Command(cl.Mesh.Binary, "export", "--node", cl.Mesh.Procs[0].HTTP, "--out", meshFile).CombinedOutput(); err != nil {
				t.Fatalf("dssp export: %v\n%s", err, b)
			}
			if b, err := tr.command(0, script, "ddp", "--opt", c.opt, "--steps", steps, "--out", ddpFile).CombinedOutput(); err != nil {
				t.Fatalf("equiv.py ddp: %v\n%s", err, b)
			}
			b, err := tr.command(0, script, "compare", meshFile, ddpFile, ddpFile+".theta0").CombinedOutput()
			if err != nil {
				t.Fatalf("equiv.py compare: %v\n%s", err, b)
			}
			var r struct {
				MaxAbs float64 `json:"max_abs"`
				MaxB   float64 `json:"max_b"`
				Rel    float64 `json:"rel"`
			}
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
				t.Fatalf("equiv.py compare printed %s: %v", b, err)
			}
			t.Logf("%s, 50 steps of 4 workers × 16: largest difference %.3g (largest parameter %.3g), ‖mesh − DDP‖ ÷ ‖DDP − θ₀‖ = %.3g",
				c.opt, r.MaxAbs, r.MaxB, r.Rel)
			if r.MaxAbs > c.maxAbs || r.Rel > c.maxRel {
				t.Fatalf("%s: the mesh's parameters differ from DDP's by %.3g (relative %.3g), bound %.3g (%.3g)", c.opt, r.MaxAbs, r.Rel, c.maxAbs, c.maxRel)
			}
		})
	}
}
