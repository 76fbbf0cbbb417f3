package test

import (
	"encoding/json"
	"math"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// suiteModel is one model of test/pytorch/models.py with the accuracy the
// suite trains it to and what its export must hold.
type suiteModel struct {
	name   string
	target float64
	names  []string // state_dict entries the export must hold beside the parameters
	dtype  string   // a dtype the export must hold ("" : float32 only)
}

// suiteModels: none of them the examples' MLP, each with what real models
// have: BatchNorm's buffers, a tied weight, a frozen parameter, bf16
// parameters, two param groups with a scheduler, AdamW.
var suiteModels = []suiteModel{
	{"cnn-bn", 0.93, []string{"bn1.running_mean", "bn1.running_var", "bn1.num_batches_tracked", "bn2.running_var"}, "torch.int64"},
	{"tied-lm", 0.85, []string{"emb.weight", "out.weight", "norm.weight"}, ""},
	{"frozen", 0.85, []string{"proj", "head.weight"}, ""},
	{"bf16", 0.88, []string{"hidden.weight", "head.bias"}, "torch.bfloat16"},
	{"groups", 0.88, []string{"hidden.weight", "head.weight"}, ""},
	{"adamw", 0.88, []string{"hidden.weight", "head.weight"}, ""},
}

// TestModelSuite is issue 45's model suite with real processes: for each
// model, a 3-node mesh on the job's defaults (dssp:3:12, int8 on the wire,
// the combine rule mean) trains it with its own optimizer to its target;
// the snapshot the mesh evaluated is exported (dssp export --evaluated),
// loaded with load_state_dict(strict=True) and evaluated in eval() on the
// same test samples: within 0.1 points of the accuracy the mesh reported.
func TestModelSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	const script, evalSamples = "test/pytorch/models.py", "1000"
	for _, m := range suiteModels {
		t.Run(m.name, func(t *testing.T) {
			c := NewCluster(t, 3,
				[]string{"--threads", "1", "--eval-every", "2s", "--eval-samples", evalSamples, "--log-level", "warn", "--trainer", "external"},
				[]string{"--model", "external", "--dataset", "suite"})
			tr := newPyTrainers(t, c)
			// Every node and trainer starts at once: node0 bootstraps the
			// job, the first trainer to attach gives the mesh its model's
			// layout, and the others join and attach as they come.
			c.Start(0)
			tr.Start(0, script, "train", m.name)
			for _, i := range []int{1, 2} {
				c.Start(i)
				tr.Start(i, script, "train", m.name)
			}
			c.WaitFor("node0's trainer attached and training", 90*time.Second, func() bool { return c.Iter(0) > 0 })
			took := c.WaitFor("the target accuracy", 150*time.Second, func() bool {
				for i := range 3 {
					if done, err := tr.Exited(i); done {
						t.Fatalf("trainer %d exited: %v", i, err)
					}
				}
				a := Accuracy(c.Statuses())
				return a != nil && a.Accuracy >= m.target
			})
			for i, s := range c.Statuses() {
				if s != nil && s.Learning != "" {
					t.Errorf("node %d flags a job that reached its target: %s", i, s.Learning)
				}
			}
			out := filepath.Join(t.TempDir(), "model.safetensors")
			exp := exec.Command(c.Mesh.Binary, "export", "--node", c.Mesh.Procs[0].HTTP, "--evaluated", "--out", out)
			if b, err := exp.CombinedOutput(); err != nil {
				t.Fatalf("dssp export --evaluated: %v\n%s", err, b)
			}
			// The check runs on the file alone: the mesh and its trainers
			// stop first rather than compete with it for the CPU.
			tr.KillAll(c)
			b, err := tr.command(0, script, "check", m.name, out).CombinedOutput()
			if err != nil {
				t.Fatalf("models.py check: %v\n%s", err, b)
			}
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			var r struct {
				Accuracy float64  `json:"accuracy"`
				Reported *float64 `json:"reported"`
				Names    []string `json:"names"`
				Dtypes   []string `json:"dtypes"`
			}
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil || r.Reported == nil {
				t.Fatalf("models.py check printed %s (%v)", b, err)
			}
			for _, n := range m.names {
				if !slices.Contains(r.Names, n) {
					t.Errorf("the export lacks %s (it holds %v)", n, r.Names)
				}
			}
			if m.dtype != "" && !slices.Contains(r.Dtypes, m.dtype) {
				t.Errorf("the export holds dtypes %v, want %s among them", r.Dtypes, m.dtype)
			}
			if math.Abs(r.Accuracy-*r.Reported) > 0.001 {
				t.Fatalf("the export evaluates to %.4f in eval(), the mesh reported %.4f", r.Accuracy, *r.Reported)
			}
			t.Logf("%s: %.2f %% after %v; the export (strict load, eval()) %.4f, reported %.4f; %d state_dict entries, dtypes %v",
				m.name, 100*m.target, took.Round(time.Second), r.Accuracy, *r.Reported, len(r.Names), r.Dtypes)
		})
	}
}
