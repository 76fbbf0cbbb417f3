package nodeclient

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"dsspmesh/cudaops"
	"dsspmesh/modelfile"
	"dsspmesh/node/records"
	"dsspmesh/node/status"
)

// serve runs h on a loopback server and returns its host:port.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func TestFetchStatusDecodesTheNodesReply(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(status.Status{Node: "n1", Phase: "training"})
	})
	s, err := FetchStatus(context.Background(), serve(t, mux))
	if err != nil || s.Node != "n1" || s.Phase != "training" {
		t.Fatalf("FetchStatus = %+v, %v; want node n1 training", s, err)
	}
}

func TestANon200ReplyIsAnErrorNamingTheURL(t *testing.T) {
	addr := serve(t, http.NotFoundHandler())
	if _, err := FetchStatus(context.Background(), addr); err == nil || !strings.Contains(err.Error(), "http://"+addr+"/status") || !strings.Contains(err.Error(), "404") {
		t.Errorf("FetchStatus from a 404: %v; want an error naming the url and the status", err)
	}
	if _, err := FetchMetrics(context.Background(), addr, time.Second); err == nil || !strings.Contains(err.Error(), "/metrics") {
		t.Errorf("FetchMetrics from a 404: %v", err)
	}
}

func TestFetchStatusWithinGivesUp(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	if _, err := FetchStatusWithin(context.Background(), addr, 50*time.Millisecond); err == nil {
		t.Fatal("FetchStatusWithin returned no error from a node that never answers")
	}
}

func TestFetchModelAsksForWhatItWantsAndValidates(t *testing.T) {
	layout := cudaops.Layout{{Name: "fc.weight", Offset: 0, Shape: []int{2, 3}}}
	var file bytes.Buffer
	if err := modelfile.Encode(&file, layout, []float32{1, 2, 3, 4, 5, 6}, modelfile.Meta{Model: "mlp", Clock: 7}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex // the handler runs on the server's goroutines
	var queries []string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /model.safetensors", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		queries = append(queries, r.URL.RawQuery)
		mu.Unlock()
		if r.URL.Query().Has("evaluated") {
			http.Error(w, "no evaluated snapshot here", http.StatusNotFound)
			return
		}
		w.Write(file.Bytes())
	})
	addr := serve(t, mux)
	b, f, err := FetchModel(context.Background(), addr, false, 3*time.Second)
	if err != nil || !bytes.Equal(b, file.Bytes()) || f.Meta.Clock != 7 {
		t.Fatalf("FetchModel fresh: %d bytes, %+v, %v", len(b), f, err)
	}
	_, _, err = FetchModel(context.Background(), addr, true, 0)
	if err == nil || !strings.Contains(err.Error(), "no evaluated snapshot here") {
		t.Errorf("FetchModel evaluated from a 404: %v; want the node's reason", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"timeout=3s", "evaluated="}; len(queries) != 2 || queries[0] != want[0] || queries[1] != want[1] {
		t.Errorf("queries %q, want %q", queries, want)
	}
	badAddr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("not safetensors")) }))
	if _, _, err := FetchModel(context.Background(), badAddr, false, time.Second); err == nil {
		t.Error("FetchModel accepted a body that is not a model file")
	}
}

// endlessHandler answers status with prefix and then the byte fill
// forever, until the client goes away.
func endlessHandler(status int, prefix []byte, fill byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status)
		chunk := bytes.Repeat([]byte{fill}, 64<<10)
		if _, err := w.Write(prefix); err != nil {
			return
		}
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}
}

// A node (or anything at its address) that answers with an endless body
// costs each call its bound, not all of memory.
func TestEndlessRepliesAreCutAtTheirBound(t *testing.T) {
	ctx := context.Background()
	status := serve(t, endlessHandler(http.StatusOK, []byte(`{"node":"`), 'a'))
	if _, err := FetchStatusWithin(ctx, status, 30*time.Second); err == nil || !strings.Contains(err.Error(), "longer than 8388608 bytes") {
		t.Errorf("FetchStatus of an endless body: %v, want refused at MaxStatusBytes", err)
	}
	if _, err := Get(ctx, "http://"+status+"/metrics", 30*time.Second); err == nil || !strings.Contains(err.Error(), "longer than 67108864 bytes") {
		t.Errorf("Get of an endless body: %v, want refused at MaxReplyBytes", err)
	}

	zeros := serve(t, endlessHandler(http.StatusOK, nil, 0))
	if _, _, err := FetchModel(ctx, zeros, false, time.Second); err == nil || !strings.Contains(err.Error(), "a header of 0 bytes") {
		t.Errorf("FetchModel of endless zeros: %v, want refused at the header", err)
	}

	layout := cudaops.Layout{{Name: "fc.weight", Offset: 0, Shape: []int{2, 3}}}
	var file bytes.Buffer
	if err := modelfile.Encode(&file, layout, make([]float32, 6), modelfile.Meta{Model: "mlp"}); err != nil {
		t.Fatal(err)
	}
	longer := serve(t, endlessHandler(http.StatusOK, file.Bytes(), 0))
	if _, _, err := FetchModel(ctx, longer, false, time.Second); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("FetchModel of a model followed by endless bytes: %v, want refused past the declared size", err)
	}

	failing := serve(t, endlessHandler(http.StatusServiceUnavailable, []byte("busy "), 'x'))
	_, _, err := FetchModel(ctx, failing, false, time.Second)
	if err == nil || !strings.Contains(err.Error(), "503") || len(err.Error()) > maxErrorBytes+200 {
		t.Errorf("FetchModel of an endless 503: %d-byte error %.80q, want the status and a bounded reason", len(err.Error()), err)
	}

	huge := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "10000000000")
		w.WriteHeader(http.StatusOK)
	}))
	if _, err := FetchStatus(ctx, huge); err == nil || !strings.Contains(err.Error(), "a reply of 10000000000 bytes") {
		t.Errorf("FetchStatus of a declared 10 GB: %v, want refused before reading", err)
	}
	if _, _, err := FetchModel(ctx, huge, false, time.Second); err == nil || !strings.Contains(err.Error(), "a model of 10000000000 bytes") {
		t.Errorf("FetchModel of a declared 10 GB: %v, want refused before reading", err)
	}
}

// TestFetchModelChecksTheClaimsDigest: an evaluated model whose bytes
// are not the ones the X-Dssp-Digest of its claim names is refused,
// both digests named; the matching one is taken.
func TestFetchModelChecksTheClaimsDigest(t *testing.T) {
	layout := cudaops.Layout{{Name: "fc.weight", Offset: 0, Shape: []int{2, 3}}}
	var file bytes.Buffer
	if err := modelfile.Encode(&file, layout, []float32{1, 2, 3, 4, 5, 6}, modelfile.Meta{Model: "mlp", Clock: 7}); err != nil {
		t.Fatal(err)
	}
	claimed := Digest(file.Bytes())
	var header string
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(records.DigestHeader, header)
		w.Write(file.Bytes())
	}))
	header = claimed
	if b, _, err := FetchModel(context.Background(), addr, true, time.Second); err != nil || Digest(b) != claimed {
		t.Fatalf("the file its claim names: %v", err)
	}
	other := strings.Repeat("ab", 32)
	header = other
	_, _, err := FetchModel(context.Background(), addr, true, time.Second)
	if err == nil || !strings.Contains(err.Error(), claimed) || !strings.Contains(err.Error(), other) {
		t.Fatalf("a file its claim does not name: %v, want an error naming %s and %s", err, claimed, other)
	}
}
