package mesh

import (
	"log/slog"
	"testing"

	"dsspmesh/internal/testlogger"
)

// testLogger routes logs to t.Log.
func testLogger(t testing.TB) *slog.Logger { return testlogger.New(t, slog.LevelInfo) }

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
