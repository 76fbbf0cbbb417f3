package node_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"dsspmesh/node"
	"dsspmesh/node/status"
)

// TestInProcessLocalRoundsBalanced runs four nodes with --local-steps 4
// and --balance at speeds 1,1,2,4: every push is a round, the rounds of
// one iteration add up to the global round (4 workers × 16 × 4 samples),
// and the balance layer sizes each worker's round to its speed — more
// local steps for the faster, so their rounds arrive together (Dynamic
// Local Updates) — once the allocation is in force. Every round starts
// from the parameters the shards returned for it: no worker keeps a
// slice (under ssp:2 a per-step worker would keep most of them), since a
// kept slice would restart a round without the worker's own last one.
func TestInProcessLocalRoundsBalanced(t *testing.T) {
	localRoundsBalanced(t, nil)
}

// TestInProcessPipelinedLocalRounds is the same under ssp:1 with
// --pipeline: each round's first half of steps runs while the push before
// is in flight (seen by the observer), its progress carried onto the
// parameters that push brings (LocalRounds), and every slice a round
// computes on, read through the gate, is within s = 1.
func TestInProcessPipelinedLocalRounds(t *testing.T) {
	rec := localRoundsBalanced(t, func(c *node.Config) {
		c.Spec.Paradigm, c.Spec.SLower, c.Spec.Pipeline = "ssp", 1, true
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	t.Logf("reads checked %d, max lag %d, rounds computed with the previous push in flight %d", rec.reads, rec.maxLag, rec.overlapped)
	if rec.reads == 0 || rec.maxLag > 1 || rec.overlapped == 0 {
		t.Errorf("reads %d, max lag %d (bound 1), overlapped %d", rec.reads, rec.maxLag, rec.overlapped)
	}
}

func localRoundsBalanced(t *testing.T, job func(c *node.Config)) *recorder {
	const nodes, shards, h = 4, 2, 4
	rec := newRecorder()
	m := startMesh(t, nodes, shards, rec, func(i int, c *node.Config) {
		c.Spec.Balance = true
		c.Spec.LocalSteps = h
		c.Spec.InnerLR = 0.02
		c.ComputeDelay = 2 * time.Millisecond
		c.Slowdown = []float64{1, 1, 2, 4}[i]
		if job != nil {
			job(c)
		}
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
	m.mu.Lock()
	var addrs []string
	for _, nd := range m.nodes {
		addrs = append(addrs, nd.http)
	}
	m.mu.Unlock()
	minSteps, maxSteps := 1<<30, 0
	for _, a := range addrs {
		resp, err := http.Get("http://" + a + "/status")
		if err != nil {
			t.Fatal(err)
		}
		var st status.Status
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err != nil || st.Worker == nil {
			t.Fatalf("status of %s: %v", a, err)
		}
		t.Logf("%s: loss %.3g after %d rounds, %d refused, rounds of %d local steps", a, st.Worker.Loss, st.Worker.Iter, st.Worker.Refused, st.Worker.LocalSteps)
		minSteps, maxSteps = min(minSteps, st.Worker.LocalSteps), max(maxSteps, st.Worker.LocalSteps)
		if st.Worker.Refused != 0 || !(st.Worker.Loss < 1) {
			t.Errorf("%s: loss %.3f, %d refused: the rounds do not train (synthetic data starts near 2.3)", a, st.Worker.Loss, st.Worker.Refused)
		}
		if st.Worker.SlicesKept != 0 || st.Worker.SlicesPulled == 0 {
			t.Errorf("%s: %d slices kept, %d pulled: a round must start from the slices its push returned", a, st.Worker.SlicesKept, st.Worker.SlicesPulled)
		}
	}
	// /status shows each worker's local steps, sized to its speed.
	if minSteps < 2 || maxSteps <= minSteps {
		t.Errorf("local steps in /status from %d to %d: want each at least 2, the fastest's above the slowest's", minSteps, maxSteps)
	}
	m.stop(t)
	return rec
}
