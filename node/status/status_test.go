package status

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// A node that does not train is up once it hosts its shards: its phase is
// hosting, and the readiness probe says ready.
func TestReadyWhenHosting(t *testing.T) {
	for phase, want := range map[string]int{"training": http.StatusOK, "hosting": http.StatusOK, "joining": http.StatusServiceUnavailable, "leaving": http.StatusServiceUnavailable} {
		st := func() Status { s := sampleStatus(); s.Phase = phase; return s }
		srv := httptest.NewServer(NewHTTPHandler(st, NewMetrics(st)))
		res, err := http.Get(srv.URL + "/status?ready")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		srv.Close()
		if res.StatusCode != want {
			t.Errorf("/status?ready of a node %s: %d, want %d", phase, res.StatusCode, want)
		}
	}
}
