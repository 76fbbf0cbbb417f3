package eval

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"time"

	"dsspmesh/mesh"
	"dsspmesh/modelfile"
	"dsspmesh/node/records"
)

// Export timeouts: the default of GET /model.safetensors and the most a
// caller may ask for with ?timeout=.
const (
	exportTimeout    = 30 * time.Second
	maxExportTimeout = 5 * time.Minute
)

// ServeModel answers GET /model.safetensors: a fresh snapshot read from
// every shard's leader, or with ?evaluated the snapshot the evaluator last
// evaluated: this node's own when it is the evaluator (or none is known),
// else asked of the evaluator over the control channel (forward.go).
func (rm *Room) ServeModel(w http.ResponseWriter, r *http.Request) {
	timeout := exportTimeout
	if v := r.URL.Query().Get("timeout"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			http.Error(w, fmt.Sprintf("timeout %q is not a positive duration", v), http.StatusBadRequest)
			return
		}
		timeout = min(d, maxExportTimeout)
	}
	done, ok := rm.admit(w, r)
	if !ok {
		return
	}
	defer done()
	// Until the model is read nothing is written: an error then is still
	// written within Base after the read's timeout (the server's deadline
	// for small responses may be shorter than ?timeout).
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(timeout + rm.export.Base))
	if r.URL.Query().Has("evaluated") {
		if ev := rm.d.Evaluator(); ev != "" && ev != string(rm.d.ID) && rm.d.AskControl != nil {
			rm.forwardEvaluated(w, r, mesh.NodeID(ev), timeout)
			return
		}
		rm.evaluated.serve(func(snap *Snapshot, file string, claim *records.EvalResult) {
			if claim != nil && claim.Digest != "" {
				w.Header().Set(records.DigestHeader, claim.Digest)
			}
			switch {
			case snap != nil:
				rm.writeModel(w, snap)
			case file != "":
				rm.serveFile(w, r, file)
			default:
				http.Error(w, fmt.Sprintf("node %s holds no evaluated model (the evaluator is %q; the last one is gone while the next evaluation reads the model); ask the evaluator again, or drop ?evaluated for a fresh snapshot", rm.d.ID, rm.d.Evaluator()), http.StatusNotFound)
			}
		})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	// Each fresh snapshot is the whole model in memory until its
	// responses are written: shared, at most export.Concurrent at once.
	fs, release, err := rm.fresh(ctx)
	if err != nil {
		http.Error(w, fmt.Sprintf("node %s: %v", rm.d.ID, err), http.StatusServiceUnavailable)
		return
	}
	defer release()
	w.Header().Set("X-Dssp-Snapshot-Age", fs.age())
	rm.writeModel(w, fs.snap)
}

// writeModel answers with snap as a safetensors file, written straight
// from the snapshot with its length counted first: a 100 MB model is not
// encoded into a buffer on the node.
func (rm *Room) writeModel(w http.ResponseWriter, snap *Snapshot) {
	job, ok := rm.d.Job()
	if !ok {
		http.Error(w, "the node has not joined the mesh's shards yet", http.StatusServiceUnavailable)
		return
	}
	layout := job.Layout
	size, err := modelfile.Size(layout, snap.Theta, snap.Meta)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	sw := rm.stalling(w, size)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	w.Header().Set("Cache-Control", "no-store")
	bw := bufio.NewWriterSize(sw, downloadChunk)
	err = modelfile.Encode(bw, layout, snap.Theta, snap.Meta)
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		// The header is out: all that is left is to say why the body stopped.
		rm.d.Logger.Warn("model export cut short", "err", err)
	}
}

// serveFile answers with the model file at path, as it is when opened.
func (rm *Room) serveFile(w http.ResponseWriter, r *http.Request, path string) {
	f, err := os.Open(path)
	if err != nil {
		http.Error(w, fmt.Sprintf("node %s: the evaluated model: %v", rm.d.ID, err), http.StatusInternalServerError)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		http.Error(w, fmt.Sprintf("node %s: the evaluated model: %v", rm.d.ID, err), http.StatusInternalServerError)
		return
	}
	sw := rm.stalling(w, st.Size())
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Cache-Control", "no-store")
	http.ServeContent(sw, r, "", st.ModTime(), f)
}

// WithModel adds GET /model.safetensors to h.
func WithModel(h http.Handler, serve http.HandlerFunc) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("GET /model.safetensors", serve)
	return mux
}
