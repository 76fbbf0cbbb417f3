package eval

import (
	"bytes"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"dsspmesh/cudaops"
	"dsspmesh/modelfile"
)

// A model read asks every shard of a small model at once and a 100 MB
// model's 12.5 MB slices two at a time (readBytesInFlight).
func TestReadsInFlight(t *testing.T) {
	even := func(shards, params int) [][2]int {
		var b [][2]int
		for s := range shards {
			b = append(b, [2]int{s * params / shards, (s + 1) * params / shards})
		}
		return b
	}
	for _, c := range []struct {
		bounds [][2]int
		want   int
	}{
		{even(1, 235146), 1}, {even(4, 235146), 4}, {even(8, 24901642), 1}, {even(16, 24901642), 2}, {even(4, 24901642), 1}, {even(2, 1<<28), 1},
	} {
		if got := readsInFlight(c.bounds); got != c.want {
			t.Errorf("%d shards up to %d: %d reads in flight, want %d", len(c.bounds), c.bounds[len(c.bounds)-1][1], got, c.want)
		}
	}
}

// TestServeEvaluated: GET /model.safetensors?evaluated is written straight
// from the snapshot in memory, its Content-Length counted first, or, for
// a model evaluated in the worker's θ, is the file kept in the data dir.
func TestServeEvaluated(t *testing.T) {
	mlp, err := cudaops.NewModel("mlp", cudaops.ModelOptions{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	n := New(Deps{ID: "n1", Logger: slog.New(slog.DiscardHandler), Evaluator: func() string { return "" },
		Job: func() (Job, bool) { return Job{Layout: mlp.Layout()}, true }}, nil)
	theta := mlp.Init(3)
	meta := modelfile.Meta{Model: "mlp", Clock: 4, Eval: &modelfile.Eval{Accuracy: 0.5, Samples: 10}}
	get := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		n.ServeModel(rec, httptest.NewRequest("GET", "/model.safetensors?evaluated", nil))
		return rec
	}
	n.evaluated.set(&Snapshot{Theta: theta, Meta: meta}, "", nil)
	rec := get()
	f, err := modelfile.Decode(rec.Body.Bytes())
	if rec.Code != 200 || err != nil || rec.Header().Get("Content-Length") != strconv.Itoa(rec.Body.Len()) {
		t.Fatalf("from memory: %d, %v, Content-Length %s of %d bytes", rec.Code, err, rec.Header().Get("Content-Length"), rec.Body.Len())
	}
	if got, err := f.Params(mlp.Layout()); err != nil || !slices.Equal(got, theta) || f.Meta.Eval == nil {
		t.Fatalf("from memory: parameters differ (%v) or no evaluation", err)
	}
	path := filepath.Join(t.TempDir(), EvaluatedFile)
	if err := modelfile.WriteFile(path, mlp.Layout(), theta, meta); err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(path)
	n.evaluated.set(nil, path, nil)
	if rec := get(); rec.Code != 200 || !bytes.Equal(rec.Body.Bytes(), want) {
		t.Fatalf("from the file: %d, %d bytes, want the file's %d", rec.Code, rec.Body.Len(), len(want))
	}
	// An evaluation in the worker's θ starts: the file is still served.
	n.evaluated.dropMemory()
	if rec := get(); rec.Code != 200 || !bytes.Equal(rec.Body.Bytes(), want) {
		t.Fatalf("during the next evaluation: %d, %d bytes, want the file's %d", rec.Code, rec.Body.Len(), len(want))
	}
}
