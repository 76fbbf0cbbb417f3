package node_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"dsspmesh/mesh"
	"dsspmesh/node"
)

// TestInProcessAnyNodeServesTheEvaluatedModel runs three in-process nodes
// serving HTTP: every node's /status lists each member's HTTP address (as
// the member announced it in its view answer), and GET
// /model.safetensors?evaluated on a node that is not the evaluator serves
// the evaluator's evaluated model, byte for byte, fetched over the
// control channel.
func TestInProcessAnyNodeServesTheEvaluatedModel(t *testing.T) {
	rec := newRecorder()
	m := startMesh(t, 3, 2, rec, func(i int, c *node.Config) {
		c.EvalEvery, c.EvalSamples = 500*time.Millisecond, 256
	})
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
	status := func(id mesh.NodeID) (node.Status, bool) {
		code, b, _ := get(httpOf[id], "/status")
		var s node.Status
		return s, code == 200 && json.Unmarshal(b, &s) == nil
	}

	var evaluator mesh.NodeID
	rec.wait(t, "every node lists every member's HTTP address and knows an evaluation", func() bool {
		for id := range httpOf {
			s, ok := status(id)
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
	var other mesh.NodeID
	for id := range httpOf {
		if id != evaluator {
			other = id
		}
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
		if !bytes.Equal(got, before) || h.Get("X-Dssp-Evaluator") != string(evaluator) {
			t.Fatalf("%s served %d bytes (from %q), the evaluator %s %d: not the same file", other, len(got), h.Get("X-Dssp-Evaluator"), evaluator, len(before))
		}
		size = len(got)
		return true
	})
	t.Logf("%s served the evaluator's %d-byte evaluated model", other, size)
	if code, b, _ := get(httpOf[other], "/model.safetensors?evaluated&timeout=x"); code != 400 {
		t.Errorf("a bad timeout: %d %s", code, b)
	}
	m.stop(t)
}
