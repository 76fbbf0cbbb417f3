package plot

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"dsspmesh/node"
	"dsspmesh/node/launch"
)

// TestUpDrawsBothCharts: a run's samples, evaluations and a kill become
// accuracy.png and clocks.png, each a PNG.
func TestUpDrawsBothCharts(t *testing.T) {
	r := &launch.Result{
		Evals: []launch.EvalPoint{{Elapsed: time.Second, Accuracy: 0.5}, {Elapsed: 2 * time.Second, Accuracy: 0.9}},
		Chaos: []launch.ChaosEvent{{Node: 1, Killed: 1500 * time.Millisecond}},
	}
	for i := range 3 {
		for n := range 2 {
			r.Samples = append(r.Samples, launch.Sample{Elapsed: time.Duration(i) * time.Second, Node: n, ID: "n", Up: true,
				Worker: node.LocalWorker{Iter: uint64(10 * i)}})
		}
	}
	dir := t.TempDir()
	if err := Up(dir, r); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"accuracy.png", "clocks.png"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
			t.Errorf("%s is not a PNG (%d bytes)", name, len(b))
		}
	}
}
