package node_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"dsspmesh/mesh"
	"dsspmesh/node"
	"dsspmesh/node/status"
)

// TestInProcessAnyNodeServesTheEvaluatedModel runs three in-process nodes
// serving HTTP, the third with --train=false: every node's /status lists
// each member's HTTP address (as the member announced it in its view
// answer); GET /model.safetensors?evaluated on the node that does not
// train (so is not the evaluator) serves the evaluator's evaluated model,
// byte for byte, fetched over the control channel; and every node's
// /metrics passes promtool, the one that does not train without the
// worker loop's metrics.
func TestInProcessAnyNodeServesTheEvaluatedModel(t *testing.T) {
	rec := newRecorder()
	var idle mesh.NodeID
	m := startMesh(t, 3, 2, rec, func(i int, c *node.Config) {
		c.EvalEvery, c.EvalSamples = 500*time.Millisecond, 256
		if i == 2 {
			c.Train = false
		}
	})
	m.mu.Lock()
	for id, nd := range m.nodes {
		if !nd.trains {
			idle = id
		}
	}
	m.mu.Unlock()
	httpOf := map[mesh.NodeID]string{}
	m.mu.Lock()
	for id, nd := range m.nodes {
		httpOf[id] = nd.http
	}
	m.mu.Unlock()
	get := func(addr, path string) (int, []byte, http.Header) {
		res, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, nil, nil
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			return 0, nil, nil
		}
		return res.StatusCode, b, res.Header
	}
	statusOf := func(id mesh.NodeID) (status.Status, bool) {
		code, b, _ := get(httpOf[id], "/status")
		var s status.Status
		return s, code == 200 && json.Unmarshal(b, &s) == nil
	}

	var evaluator mesh.NodeID
	rec.wait(t, "every node lists every member's HTTP address and knows an evaluation", func() bool {
		for id := range httpOf {
			s, ok := statusOf(id)
			if !ok || s.Eval == nil || s.Evaluator == "" || s.HTTP != httpOf[id] || len(s.Members) != len(httpOf) {
				return false
			}
			for _, mb := range s.Members {
				if mb.HTTP != httpOf[mesh.NodeID(mb.ID)] {
					return false
				}
			}
			evaluator = mesh.NodeID(s.Evaluator)
		}
		return true
	})
	other := idle
	if other == evaluator {
		t.Fatalf("the node that does not train, %s, evaluates", idle)
	}
	t.Logf("evaluator %s at %s; asking %s at %s", evaluator, httpOf[evaluator], other, httpOf[other])

	// The evaluator's evaluated model changes at each evaluation: the
	// other node's answer must equal the evaluator's when the evaluator
	// answered the same before and after it.
	const path = "/model.safetensors?evaluated"
	var size int
	rec.wait(t, "the other node serves the evaluator's evaluated model", func() bool {
		c1, before, _ := get(httpOf[evaluator], path)
		c2, got, h := get(httpOf[other], path)
		c3, after, _ := get(httpOf[evaluator], path)
		if c1 != 200 || c2 != 200 || c3 != 200 || !bytes.Equal(before, after) {
			return false
		}
		if by := mesh.NodeID(h.Get("X-Dssp-Evaluator")); by != evaluator && httpOf[by] != "" {
			// The lease moved since the statuses were read (the holder is
			// the trainer shard 0 grants it to; early in a run a shard's
			// leader change can hand it on): follow it.
			t.Logf("%s served the evaluated model of %s, the evaluator now", other, by)
			evaluator = by
			return false
		}
		if !bytes.Equal(got, before) {
			t.Fatalf("%s served %d bytes (from %q), the evaluator %s %d: not the same file", other, len(got), h.Get("X-Dssp-Evaluator"), evaluator, len(before))
		}
		size = len(got)
		return true
	})
	t.Logf("%s served the evaluator's %d-byte evaluated model", other, size)
	if code, b, _ := get(httpOf[other], "/model.safetensors?evaluated&timeout=x"); code != 400 {
		t.Errorf("a bad timeout: %d %s", code, b)
	}

	promtool, _ := exec.LookPath("promtool")
	for id, addr := range httpOf {
		code, b, _ := get(addr, "/metrics")
		if code != 200 {
			t.Fatalf("%s /metrics: %d", id, code)
		}
		text := string(b)
		trains := id != idle
		if has := strings.Contains(text, "\ndssp_worker_iterations_total "); has != trains {
			t.Errorf("%s (trains %v) exports dssp_worker_iterations_total: %v", id, trains, has)
		}
		for _, gone := range []string{"dssp_local_worker_iteration", "dssp_shard_leader{", "process_network_"} {
			if strings.Contains(text, gone) {
				t.Errorf("%s exports %s", id, gone)
			}
		}
		if !strings.Contains(text, "dssp_shard_is_leader{shard=") {
			t.Errorf("%s exports no dssp_shard_is_leader", id)
		}
		if promtool != "" {
			cmd := exec.Command(promtool, "check", "metrics")
			cmd.Stdin = bytes.NewReader(b)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Errorf("%s: promtool check metrics: %v\n%s", id, err, out)
			}
			t.Logf("%s (trains %v): promtool check metrics on %d bytes: exit 0 %v, %q", id, trains, len(b), err == nil, out)
		}
	}
	m.stop(t)
}
