package node_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"dsspmesh/mesh"
	"dsspmesh/node"
	"dsspmesh/node/status"
)

// TestInProcessWorkerStoppedByRefusalsLeavesTheGates: under ssp:2, one
// node's every gradient is NaN (--fault-nan-every 1, a broken device).
// The shards refuse each, the worker stops after 20 refusals in a row
// and leaves every shard's gate, so the two other workers train on far
// past the staleness bound instead of waiting behind its clock; the node
// itself stays up, /status says why its worker stopped, and the graceful
// stop at the end (Worker.Leave after a worker that already left) is
// clean.
func TestInProcessWorkerStoppedByRefusalsLeavesTheGates(t *testing.T) {
	const (
		nodes, shards = 3, 2
		iters         = 12 // each healthy worker's iterations: six times the bound of 2
	)
	rec := newRecorder()
	var brokenDir string
	m := startMesh(t, nodes, shards, rec, func(i int, c *node.Config) {
		if i == 0 { // the first: in the gates before the others join
			c.FaultNaNEvery = 1
			brokenDir = c.DataDir
		}
	})
	var broken mesh.NodeID
	var brokenHTTP string
	var healthy []mesh.NodeID
	m.mu.Lock()
	for id, nd := range m.nodes {
		if nd.dir == brokenDir {
			broken, brokenHTTP = id, nd.http
		} else {
			healthy = append(healthy, id)
		}
	}
	m.mu.Unlock()

	rec.wait(t, "the broken worker leaves every shard's gate", func() bool { return rec.removedEverywhere(broken, shards) })
	rec.wait(t, "the healthy workers iterate far past the staleness bound", func() bool { return rec.allAcked(healthy, iters) })
	if n := rec.ackedOn(broken); n != 0 {
		t.Errorf("the broken worker had %d iterations acknowledged; every gradient of it is NaN", n)
	}

	res, err := http.Get("http://" + brokenHTTP + "/status")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	var s status.Status
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("status of %s: %v: %s", broken, err, b)
	}
	if s.Worker == nil || !strings.Contains(s.Worker.Stopped, "20 gradients in a row refused") || s.Worker.Iter != 0 {
		t.Fatalf("status of %s: worker %+v; want stopped by 20 refusals, no iteration", broken, s.Worker)
	}
	t.Logf("%s: phase %s, worker stopped: %s", broken, s.Phase, s.Worker.Stopped)
	m.stop(t) // Run returns cleanly: Leave after a worker that left already
}
