package mesh

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestJoinTraceReportsEachAttempt joins through two wrong seeds — a port
// where nothing listens and an HTTP server — and checks what the trace
// says of each attempt: its number, the wait before the next (the
// backoff, doubling up to its cap) and which seeds it reached.
func TestJoinTraceReportsEachAttempt(t *testing.T) {
	m := newGossipNode(t, mustSecurity(t, mustKey(t)), "trace-1", FastDetection())
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNotFound) }))
	defer web.Close()
	closed := closedPort(t)
	seeds := []string{closed, web.Listener.Addr().String()}

	var got []JoinAttempt
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := m.Join(WithJoinTrace(ctx, func(a JoinAttempt) { got = append(got, a) }), seeds)
	var je *JoinError
	if !errors.As(err, &je) {
		t.Fatalf("join err = %v, want *JoinError", err)
	}
	if len(got) != je.Attempts || len(got) < 2 {
		t.Fatalf("trace saw %d attempts, the error says %d; want the same, at least 2", len(got), je.Attempts)
	}
	next := 20 * time.Millisecond // newGossipNode's backoff: 20 ms doubling up to 100 ms
	for i, a := range got {
		if a.Attempt != i+1 || a.Next != next {
			t.Errorf("attempt %d: %+v, want number %d and next %v", i, a, i+1, next)
		}
		next = min(2*next, 100*time.Millisecond)
		if a.Reached(closed) || !a.Reached(seeds[1]) {
			t.Errorf("attempt %d reached %s: %v, %s: %v; want false, true (err %v)", a.Attempt, closed, a.Reached(closed), seeds[1], a.Reached(seeds[1]), a.Err)
		}
	}
	if (JoinAttempt{Err: errors.New("none of " + seeds[1] + " is up")}).Reached(seeds[1]) {
		t.Error("an error that does not name a failed join of the seed counts as reached")
	}
	t.Logf("last attempt: %s", strings.ReplaceAll(got[len(got)-1].Err.Error(), "\n", " "))
}

// closedPort is a loopback address where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
