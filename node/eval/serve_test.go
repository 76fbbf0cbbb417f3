package eval

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"dsspmesh/cudaops"
	"dsspmesh/modelfile"
)

// TestModelDownloadCutsAClientThatDoesNotRead: a client that asks for the
// model over a real connection and never reads is cut once the response's
// write deadline (Base + size / RateFloor) passes; the handler returns and
// lets go of the snapshot it held, the client gets less than the file.
func TestModelDownloadCutsAClientThatDoesNotRead(t *testing.T) {
	mlp, err := cudaops.NewModel("mlp", cudaops.ModelOptions{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	n := New(Deps{ID: "n1", Logger: slog.New(slog.DiscardHandler), Evaluator: func() string { return "" },
		Job:    func() (Job, bool) { return Job{Layout: mlp.Layout()}, true },
		Export: ExportLimits{Base: 300 * time.Millisecond, RateFloor: 1 << 40}}, nil)
	theta := mlp.Init(3)
	meta := modelfile.Meta{Model: "mlp", Clock: 4}
	size, err := modelfile.Size(mlp.Layout(), theta, meta)
	if err != nil {
		t.Fatal(err)
	}
	n.evaluated.set(&Snapshot{Theta: theta, Meta: meta}, "")

	done := make(chan time.Duration, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		n.ServeModel(w, r)
		done <- time.Since(start)
	}))
	// Small kernel buffers on both ends: the ~1 MB model cannot hide in them.
	srv.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		c.(*net.TCPConn).SetWriteBuffer(4096)
		return ctx
	}
	srv.Start()
	defer srv.Close()

	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprintf(c, "GET /model.safetensors?evaluated HTTP/1.1\r\nHost: x\r\n\r\n")
	select {
	case d := <-done:
		if d > 5*time.Second {
			t.Fatalf("the handler returned after %v, want about the 300 ms deadline", d)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the handler still writes to a client that does not read, 20 s on")
	}
	// The lock the response held is free: the next evaluation can set its snapshot.
	n.evaluated.set(nil, "")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, _ := io.ReadAll(c)
	head, body, _ := strings.Cut(string(got), "\r\n\r\n")
	if !strings.HasPrefix(head, "HTTP/1.1 200") || int64(len(body)) >= size {
		t.Fatalf("the client got %q and %d bytes of the %d-byte file, want a 200 cut short", head, len(body), size)
	}
}

// TestModelDownloadsAtOnce: a fresh snapshot is held per download, so at
// most ExportLimits.Concurrent run at once; one more waits within its
// ?timeout and is then a 503 that says why.
func TestModelDownloadsAtOnce(t *testing.T) {
	n := New(Deps{ID: "n1", Logger: slog.New(slog.DiscardHandler), Evaluator: func() string { return "" },
		Job: func() (Job, bool) { return Job{}, false }, Export: ExportLimits{Concurrent: 1}}, nil)
	n.exports <- struct{}{} // one download runs
	rec := httptest.NewRecorder()
	n.ServeModel(rec, httptest.NewRequest("GET", "/model.safetensors?timeout=20ms", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "1 model downloads already run") {
		t.Fatalf("a download beyond the bound: %d %q, want a 503 naming the bound", rec.Code, rec.Body.String())
	}
	<-n.exports
	rec = httptest.NewRecorder()
	n.ServeModel(rec, httptest.NewRequest("GET", "/model.safetensors?timeout=20ms", nil))
	if strings.Contains(rec.Body.String(), "already run") {
		t.Fatalf("a download within the bound refused as beyond it: %q", rec.Body.String())
	}
}
