package status

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestWriteDeadlineCutsAClientThatDoesNotRead: behind WithWriteDeadline a
// response to a client that never reads fails its writes once the
// deadline passes, and the handler returns; under /debug/pprof/ no
// deadline is set (a CPU profile streams for its whole duration).
func TestWriteDeadlineCutsAClientThatDoesNotRead(t *testing.T) {
	type result struct {
		err  error
		took time.Duration
	}
	done := make(chan result, 1)
	chunk := make([]byte, 64<<10)
	srv := httptest.NewUnstartedServer(WithWriteDeadline(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		var err error
		for written := 0; err == nil && written < 64<<20; written += len(chunk) {
			_, err = w.Write(chunk)
		}
		done <- result{err, time.Since(start)}
	}), 300*time.Millisecond))
	srv.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		c.(*net.TCPConn).SetWriteBuffer(4096)
		return ctx
	}
	srv.Start()
	defer srv.Close()
	ask := func(path string) net.Conn {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.(*net.TCPConn).SetReadBuffer(4096)
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
		return c
	}
	c := ask("/status")
	defer c.Close()
	select {
	case r := <-done:
		if r.err == nil || r.took > 5*time.Second {
			t.Fatalf("a client that does not read: the handler returned %v after %v, want a write error at about 300 ms", r.err, r.took)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the handler still writes to a client that does not read, 20 s on")
	}
	// pprof: no deadline; the handler is still blocked when the client
	// finally reads (and then finishes).
	c = ask("/debug/pprof/profile")
	defer c.Close()
	select {
	case r := <-done:
		t.Fatalf("under /debug/pprof/ the handler returned %v after %v, want no deadline", r.err, r.took)
	case <-time.After(time.Second):
	}
	c.Close()
	<-done
}
