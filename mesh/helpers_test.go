package mesh

import (
	"log/slog"
	"strings"
	"testing"
)

// testLogger routes logs to t.Log.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func mustKey(t testing.TB) MeshKey {
	t.Helper()
	k, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func mustSecurity(t testing.TB, k MeshKey) *Security {
	t.Helper()
	s, err := NewSecurity(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
