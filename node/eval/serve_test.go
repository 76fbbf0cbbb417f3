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
	n.evaluated.set(&Snapshot{Theta: theta, Meta: meta}, "", nil)

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
	n.evaluated.set(nil, "", nil)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, _ := io.ReadAll(c)
	head, body, _ := strings.Cut(string(got), "\r\n\r\n")
	if !strings.HasPrefix(head, "HTTP/1.1 200") || int64(len(body)) >= size {
		t.Fatalf("the client got %q and %d bytes of the %d-byte file, want a 200 cut short", head, len(body), size)
	}
}

// TestModelDownloadCutsAStalledClient: the whole response's deadline is
// a minute away, but a client that does not read is cut once one 64 KiB
// chunk has waited Stall.
func TestModelDownloadCutsAStalledClient(t *testing.T) {
	mlp, err := cudaops.NewModel("mlp", cudaops.ModelOptions{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	n := New(Deps{ID: "n1", Logger: slog.New(slog.DiscardHandler), Evaluator: func() string { return "" },
		Job:    func() (Job, bool) { return Job{Layout: mlp.Layout()}, true },
		Export: ExportLimits{Base: time.Minute, RateFloor: 1, Stall: 300 * time.Millisecond}}, nil)
	n.evaluated.set(&Snapshot{Theta: mlp.Init(3), Meta: modelfile.Meta{Model: "mlp"}}, "", nil)
	done := make(chan time.Duration, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		n.ServeModel(w, r)
		done <- time.Since(start)
	}))
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
			t.Fatalf("the handler returned after %v, want about the 300 ms stall", d)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the handler still writes to a client that stopped reading, 20 s on")
	}
}

// TestModelDownloadsPerClient: a client running PerClient downloads gets
// a 503 at once for one more, with Retry-After and the bound named;
// another client is not held to it.
func TestModelDownloadsPerClient(t *testing.T) {
	n := New(Deps{ID: "n1", Logger: slog.New(slog.DiscardHandler), Evaluator: func() string { return "" },
		Job: func() (Job, bool) { return Job{}, false }, Export: ExportLimits{PerClient: 1}}, nil)
	req := func(addr string) *http.Request {
		r := httptest.NewRequest("GET", "/model.safetensors?timeout=20ms", nil)
		r.RemoteAddr = addr
		return r
	}
	done, ok := n.admit(httptest.NewRecorder(), req("10.0.0.1:4000")) // one download runs
	if !ok {
		t.Fatal("the first download refused")
	}
	rec := httptest.NewRecorder()
	n.ServeModel(rec, req("10.0.0.1:4001"))
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "1" || !strings.Contains(rec.Body.String(), "1 model downloads run for 10.0.0.1") {
		t.Fatalf("a second download of one client: %d %q %q, want a 503 naming the bound", rec.Code, rec.Header(), rec.Body.String())
	}
	rec = httptest.NewRecorder()
	n.ServeModel(rec, req("10.0.0.2:4000"))
	if strings.Contains(rec.Body.String(), "model downloads run") {
		t.Fatalf("another client's download refused by the first's bound: %q", rec.Body.String())
	}
	done()
	rec = httptest.NewRecorder()
	n.ServeModel(rec, req("10.0.0.1:4002"))
	if strings.Contains(rec.Body.String(), "model downloads run") {
		t.Fatalf("a download after the first ended refused: %q", rec.Body.String())
	}
	if got := n.RefusedDownloads(); got != 1 {
		t.Fatalf("RefusedDownloads %d, want 1", got)
	}
}

// TestFreshSnapshotsShared: requests within FreshFor of a read share its
// snapshot; with Concurrent snapshots held by responses, a request takes
// the newest held rather than waiting for one to be let go; a snapshot
// no response holds is let go.
func TestFreshSnapshotsShared(t *testing.T) {
	n := New(Deps{ID: "n1", Logger: slog.New(slog.DiscardHandler), Evaluator: func() string { return "" },
		Job: func() (Job, bool) { return Job{}, false }, Export: ExportLimits{Concurrent: 2, FreshFor: time.Hour}}, nil)
	old := &freshSnap{snap: &Snapshot{}, at: time.Now().Add(-2 * time.Hour), refs: 1}
	newer := &freshSnap{snap: &Snapshot{}, at: time.Now()}
	n.freshSnaps.held = []*freshSnap{old, newer}
	ctx := context.Background()
	a, relA, err := n.fresh(ctx)
	if err != nil || a != newer {
		t.Fatalf("within FreshFor: %v %v, want the newest snapshot shared", a, err)
	}
	n.export.FreshFor = time.Nanosecond
	b, relB, err := n.fresh(ctx)
	if err != nil || b != newer || newer.refs != 2 {
		t.Fatalf("with both places held: %v %v (refs %d), want the newest held", b, err, newer.refs)
	}
	relA()
	relB()
	if len(n.freshSnaps.held) != 1 || n.freshSnaps.held[0] != old {
		t.Fatalf("held after the releases: %v, want the old one alone", n.freshSnaps.held)
	}
	// A place is free: a new read (which fails here: not joined).
	if _, _, err := n.fresh(ctx); err == nil || !strings.Contains(err.Error(), "not joined") {
		t.Fatalf("with a place free: %v, want a read", err)
	}
}
