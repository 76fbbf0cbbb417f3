package node_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"dsspmesh/node"
	"dsspmesh/node/datadir"
	"dsspmesh/node/job"
)

// TestFailedStartLeavesNoSpec starts a node whose dataset is missing (dssp
// node --dataset mnist --data /nonexistent): the start fails and the data
// dir keeps no job spec, so the retry on the same data dir with corrected
// flags and another paradigm starts with its own job rather than the failed
// one's, and persists that.
func TestFailedStartLeavesNoSpec(t *testing.T) {
	dir := t.TempDir()
	first := startMesh(t, 1, 1, newRecorder(), func(_ int, c *node.Config) {
		c.DataDir, c.Spec.Dataset, c.DataPath = dir, "mnist", "/nonexistent"
		c.Spec.Replication = 1
	})
	first.mu.Lock()
	var nd *inprocNode
	for id, n := range first.nodes {
		nd = n
		delete(first.nodes, id)
	}
	first.mu.Unlock()
	select {
	case err := <-nd.done:
		if err == nil || !strings.Contains(err.Error(), "dataset mnist") {
			t.Fatalf("start with a missing dataset: %v, want an error naming the dataset", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the start with a missing dataset did not end within a minute")
	}
	if _, err := os.Stat(filepath.Join(dir, "spec.json")); !os.IsNotExist(err) {
		t.Fatalf("the failed start left spec.json (%v)", err)
	}

	rec := newRecorder()
	second := startMesh(t, 1, 1, rec, func(_ int, c *node.Config) {
		c.DataDir, c.Spec.Paradigm, c.Spec.SLower = dir, "bsp", 0
		c.Spec.Replication = 1
	})
	id := second.ids()[0]
	rec.wait(t, "the retry trains", func() bool { return rec.ackedOn(id) >= 2 })
	d := readSpec(t, dir, second)
	if d.Paradigm != "bsp" || d.Dataset != "synthetic-mnist" {
		t.Fatalf("persisted spec after the retry: %s on %s, want bsp on synthetic-mnist", d.PolicyText(), d.Dataset)
	}
}

// readSpec stops m (which holds the data dir's lock) and reads dir's spec.
func readSpec(t *testing.T, dir string, m *inprocMesh) job.Spec {
	t.Helper()
	m.stop(t)
	d, err := datadir.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	s, ok, err := d.Spec()
	if !ok || err != nil {
		t.Fatalf("no spec after a successful start: %v", err)
	}
	return s
}
