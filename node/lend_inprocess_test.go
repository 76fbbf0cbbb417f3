package node_test

import (
	"path/filepath"
	"testing"
	"time"

	"dsspmesh/cudaops"
	"dsspmesh/modelfile"
	"dsspmesh/node"
)

// TestInProcessEvaluationBorrowsTheWorkersParameters evaluates every
// 100 ms in the worker's own θ (the lending of a large model, turned on
// for the MLP), lock-step and pipelined: the workers keep training, every
// slice an iteration computes on is still within the bound — a borrowed
// θ comes back holding the read's newer versions — and the evaluator's
// checkpoints, written while θ is lent, are whole models. Under
// --pipeline θ was once lent at the top of an iteration after a refused
// push or a moved clock, and the iteration computed ahead of its push then
// ran on a read one short of the bound (max lag 2, one run in six on a
// loaded machine); lock-step, a lend after a moved clock once marked the
// read it brought as through the gate (max lag 2 in CI).
func TestInProcessEvaluationBorrowsTheWorkersParameters(t *testing.T) {
	defer node.SetEvalLendBytes(0)()
	for _, pipeline := range []bool{false, true} {
		t.Run(map[bool]string{false: "lock-step", true: "pipelined"}[pipeline], func(t *testing.T) {
			ckpt := t.TempDir()
			rec := newRecorder()
			m := startMesh(t, 3, 2, rec, func(i int, c *node.Config) {
				c.EvalEvery = 100 * time.Millisecond
				c.CheckpointDir, c.CheckpointEvery, c.CheckpointKeep = ckpt, 100*time.Millisecond, 100
				c.Spec.Paradigm, c.Spec.SLower, c.Spec.Pipeline = "ssp", 1, pipeline
			})
			checkpoints := func() []string {
				names, _ := filepath.Glob(filepath.Join(ckpt, "*.safetensors")) // not the temporary files
				return names
			}
			// How many evaluations finish in 30 iterations depends on the
			// machine's load: training goes on until the first has.
			rec.wait(t, "every worker computes 30 iterations and an evaluation writes a checkpoint", func() bool {
				return rec.allAcked(m.ids(), 30) && len(checkpoints()) > 0
			})
			m.stop(t)
			rec.mu.Lock()
			t.Logf("reads checked %d, max lag %d", rec.reads, rec.maxLag)
			if rec.reads == 0 || rec.maxLag > 1 {
				t.Errorf("reads %d, max lag %d (bound 1)", rec.reads, rec.maxLag)
			}
			rec.mu.Unlock()
			names := checkpoints()
			mlp, _ := cudaops.NewModel("mlp", cudaops.ModelOptions{Workers: 1})
			for _, name := range names {
				if _, f, err := modelfile.LoadParams(name, mlp); err != nil || f.Meta.Eval == nil {
					t.Errorf("checkpoint %s: %v (evaluation %v)", filepath.Base(name), err, f != nil && f.Meta.Eval != nil)
				}
			}
		})
	}
}
