package status

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

//go:embed dashboard.html
var dashboardHTML []byte

// NewHTTPHandler serves the dashboard at /, the node's [Status] as JSON at
// /status (with ?ready, a 503 until the node is up, training or hosting:
// a readiness probe) and Prometheus metrics at /metrics. status must be safe for
// concurrent use.
func NewHTTPHandler(status func() Status, m *Metrics) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(dashboardHTML)
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		// Encoded before anything is written: a failure is a 500 with the
		// reason, never a 200 with an empty or truncated body. Non-finite
		// numbers (a diverging job) are null.
		st := status()
		b, err := MarshalFinite(st)
		var out bytes.Buffer
		if err == nil {
			err = json.Indent(&out, b, "", "  ")
		}
		if err != nil {
			http.Error(w, "encode status: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		out.WriteByte('\n')
		if r.URL.Query().Has("ready") && !st.Up() {
			// A readiness probe (/status?ready): ready once joined, the
			// spec adopted and the replicas up.
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		w.Write(out.Bytes())
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	return mux
}

// WithPprof adds net/http/pprof's handlers to h under /debug/pprof/ and
// turns on block and mutex sampling, off by default in the runtime.
func WithPprof(h http.Handler) http.Handler {
	runtime.SetBlockProfileRate(int(100 * time.Microsecond))
	runtime.SetMutexProfileFraction(100)
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// NewServer is the HTTP server of a node, serving h.
func NewServer(h http.Handler) *http.Server {
	// IdleTimeout closes kept-alive connections nobody uses; ReadTimeout
	// bounds a slow request body. No WriteTimeout: a pprof CPU profile
	// streams for its whole duration.
	return &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: 60 * time.Second}
}

// WithSeries adds GET /status/history to h: the [SeriesHistory] of s as
// JSON, which the dashboard fetches once when it opens so that it draws
// the run so far.
func WithSeries(h http.Handler, s *Series) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("GET /status/history", func(w http.ResponseWriter, r *http.Request) {
		b, err := MarshalFinite(s.History())
		if err != nil {
			http.Error(w, "encode history: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.Write(append(b, '\n'))
	})
	return mux
}
