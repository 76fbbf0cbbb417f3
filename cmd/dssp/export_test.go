package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"dsspmesh/cudaops"
	"dsspmesh/modelfile"
)

// TestExportEvaluatedAsksAgainWhileTheEvaluatorHoldsNone: a 404 to the
// evaluated model (the evaluator's next evaluation is reading the model)
// is asked again, once a second, until the model comes; a fresh model's
// 404 is not, and neither is the evaluated one's past the timeout.
func TestExportEvaluatedAsksAgainWhileTheEvaluatorHoldsNone(t *testing.T) {
	defer func(d time.Duration) { exportRetryEvery = d }(exportRetryEvery)
	exportRetryEvery = 5 * time.Millisecond
	var model bytes.Buffer
	layout := cudaops.Layout{{Name: "w", Shape: []int{2, 3}}, {Name: "b", Offset: 6, Shape: []int{2}}}
	if err := modelfile.Encode(&model, layout, make([]float32, 8), modelfile.Meta{}); err != nil {
		t.Fatal(err)
	}
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if asked.Add(1) <= 2 {
			http.Error(w, "the evaluator node-x holds no evaluated model now; ask again", http.StatusNotFound)
			return
		}
		w.Write(model.Bytes())
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")

	var said bytes.Buffer
	b, f, err := fetchModel(context.Background(), &said, addr, true, 10*time.Second)
	if err != nil || f == nil || len(b) != model.Len() {
		t.Fatalf("evaluated model after two 404s: %d bytes, %v", len(b), err)
	}
	if asked.Load() != 3 || strings.Count(said.String(), "waiting for the evaluator's model") != 1 {
		t.Fatalf("asked %d times, said %q", asked.Load(), said.String())
	}

	asked.Store(0)
	if _, _, err := fetchModel(context.Background(), &said, addr, false, 10*time.Second); err == nil || asked.Load() != 1 {
		t.Fatalf("a fresh model's 404 asked %d times: %v", asked.Load(), err)
	}
	asked.Store(0)
	if _, _, err := fetchModel(context.Background(), &said, addr, true, time.Millisecond); err == nil || !strings.Contains(err.Error(), "404") || asked.Load() != 1 {
		t.Fatalf("past the timeout: asked %d times: %v", asked.Load(), err)
	}
}
