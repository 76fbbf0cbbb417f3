package status

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"runtime"
	"strings"
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

// SmallWriteTimeout is the write deadline of every response but the
// model's (which sets its own, sized to the file: eval.ServeModel) and
// pprof's (a CPU profile streams for its whole duration; loopback only):
// a client that asks for /status, /metrics or the dashboard and does not
// read is cut after it and its connection freed, with whatever else it
// pipelined.
const SmallWriteTimeout = 10 * time.Second

// NewServer is the HTTP server of a node, serving h.
func NewServer(h http.Handler) *http.Server {
	// IdleTimeout closes kept-alive connections nobody uses; ReadTimeout
	// bounds a slow request body; ReadHeaderTimeout a slow header. No
	// server-wide WriteTimeout: each response sets its own deadline
	// (WithWriteDeadline, and the model's sized to its file).
	return &http.Server{Handler: WithWriteDeadline(h, SmallWriteTimeout), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: 60 * time.Second}
}

// WithWriteDeadline sets the write deadline of every response of h but
// those under /debug/pprof/ to d from when its request arrives; a handler
// may move it (http.ResponseController.SetWriteDeadline).
func WithWriteDeadline(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/debug/pprof/") {
			http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d))
		}
		h.ServeHTTP(w, r)
	})
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
