package node_test

import (
	"testing"
	"time"

	"dsspmesh/node"
)

// TestInProcessLocalRoundsBalanced runs four nodes with --local-steps 4
// and --balance at speeds 1,1,2,4: every push is a round, the rounds of
// one iteration add up to the global round (4 workers × 16 × 4 samples),
// and the balance layer sizes each worker's round to its speed — more
// local steps for the faster, so their rounds arrive together (Dynamic
// Local Updates) — once the allocation is in force.
func TestInProcessLocalRoundsBalanced(t *testing.T) {
	const nodes, shards, h = 4, 2, 4
	rec := newRecorder()
	m := startMesh(t, nodes, shards, rec, func(i int, c *node.Config) {
		c.Spec.Balance = true
		c.Spec.LocalSteps = h
		c.Spec.InnerLR = 0.02
		c.ComputeDelay = 2 * time.Millisecond
		c.Slowdown = []float64{1, 1, 2, 4}[i]
	})
	ids := m.ids()
	rec.wait(t, "every worker computes 12 rounds", func() bool {
		return len(rec.commonIters(ids, nil)) >= 12 && m.fullyReplicated(shards, 3)
	})
	rec.checkGlobal(t, ids, nil, 4, nodes*16*h)
	common := rec.commonIters(ids, nil)
	last := common[len(common)-1]
	rec.mu.Lock()
	fast, slow := int64(0), int64(1<<62)
	for _, id := range ids {
		fast, slow = max(fast, rec.samples[id][last]), min(slow, rec.samples[id][last])
	}
	rec.mu.Unlock()
	if fast < 2*slow {
		t.Errorf("round %d: the fastest worker's round has %d samples, the slowest's %d: not sized to speed", last, fast, slow)
	}
	m.stop(t)
}
