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
	"dsspmesh/node"
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
		json.NewEncoder(w).Encode(node.Status{Node: "n1", Phase: "training"})
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
