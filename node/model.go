package node

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"dsspmesh/clock"
	"dsspmesh/cudaops"
	"dsspmesh/mesh"
	"dsspmesh/modelfile"
	"dsspmesh/shardapi"
)

// modelSnapshot is the mesh's parameters read from every shard's leader
// (see "Model snapshots" in the package doc).
type modelSnapshot struct {
	theta []float32
	meta  modelfile.Meta
}

// modelReader reads every shard through one shardapi.Client each; clients
// are not safe for concurrent use, so one read runs at a time: turn holds
// the token of the read in progress (a channel, so waiting for it obeys
// the caller's deadline).
type modelReader struct {
	turn    chan struct{}
	clients []*shardapi.Client // guarded by turn
}

func newModelReader() *modelReader { return &modelReader{turn: make(chan struct{}, 1)} }

// readBytesInFlight bounds the fp32 replies a model read holds at once:
// every shard of a small model is read side by side, a 100 MB model's
// 12.5 MB slices one at a time (each reply is decoded into the snapshot
// as it arrives; all eight at once held 100 MB of replies on the reader,
// and the evaluator of that model peaks while it reads).
const readBytesInFlight = 16 << 20

// readsInFlight is how many of the shards (bounds) a read asks at once.
func readsInFlight(bounds [][2]int) int {
	largest := 1
	for _, b := range bounds {
		largest = max(largest, 4*(b[1]-b[0]))
	}
	return max(1, min(len(bounds), readBytesInFlight/largest))
}

// readModel reads every shard's slice from its leader (each a linearizable
// read, shardapi.Client.ReadInto), concurrently up to readBytesInFlight of
// replies, each decoded straight into the flat vector: into's memory when
// it has the model's length, else new memory.
func (n *Node) readModel(ctx context.Context, source string, into []float32) (*modelSnapshot, error) {
	snap, _, err := n.readModelVersions(ctx, source, into)
	return snap, err
}

// readModelVersions is readModel also giving the version of each shard's
// slice it read whole, nil for a shard whose read failed (its part of into
// may be half written), whether or not the read as a whole succeeded.
func (n *Node) readModelVersions(ctx context.Context, source string, into []float32) (*modelSnapshot, []*shardapi.Version, error) {
	n.mu.RLock()
	shards, spec := n.shards, n.spec
	n.mu.RUnlock()
	if shards == nil || spec == nil {
		return nil, nil, errors.New("the node has not joined the mesh's shards yet")
	}
	r := n.reader
	select {
	case r.turn <- struct{}{}:
		defer func() { <-r.turn }()
	case <-ctx.Done():
		return nil, nil, fmt.Errorf("read the model: another read still runs: %w", ctx.Err())
	}
	if r.clients == nil {
		resolve := mesh.ResolveFromMembership(n.members)
		for s := range shards.Bounds() {
			id := uint32(s)
			c, err := shardapi.NewClient(shardapi.DefaultClientConfig(id, clock.WorkerID(n.id), func() []mesh.NodeID { return shards.Candidates(id) }),
				n.tr, resolve, n.log)
			if err != nil {
				return nil, nil, err
			}
			r.clients = append(r.clients, c)
		}
	}
	if len(into) != n.model.NumParams() {
		into = make([]float32, n.model.NumParams())
	}
	snap := &modelSnapshot{theta: into}
	got := make([]shardapi.Slice, len(r.clients))
	errs := make([]error, len(r.clients))
	var wg sync.WaitGroup
	turns := make(chan struct{}, readsInFlight(shards.Bounds()))
	for i, c := range r.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			turns <- struct{}{}
			defer func() { <-turns }()
			b := shards.Bounds()[i]
			got[i], errs[i] = c.ReadInto(ctx, snap.theta[b[0]:b[1]])
		}()
	}
	wg.Wait()
	versions := make([]*shardapi.Version, len(got))
	for i, sl := range got {
		if b := shards.Bounds()[i]; errs[i] == nil && len(sl.Params) == b[1]-b[0] {
			versions[i] = &shardapi.Version{Index: sl.Index, Min: sl.Min}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, versions, fmt.Errorf("read the model: %w", err)
	}
	job, _ := json.Marshal(spec)
	snap.meta = modelfile.Meta{Model: spec.Model, Dataset: spec.Dataset, Source: source, TakenAt: time.Now(), Job: string(job)}
	for i, sl := range got {
		b := shards.Bounds()[i]
		if len(sl.Params) != b[1]-b[0] {
			return nil, versions, fmt.Errorf("read the model: shard %d returned %d parameters, want %d", i, len(sl.Params), b[1]-b[0])
		}
		snap.meta.Shards = append(snap.meta.Shards, modelfile.ShardClock{Shard: sl.Shard, Leader: string(sl.Leader),
			Min: sl.Min, Max: sl.Max, Index: sl.Index, Samples: sl.Samples})
		if i == 0 || sl.Min < snap.meta.Clock {
			snap.meta.Clock = sl.Min
		}
		if i == 0 || sl.Samples < snap.meta.Samples {
			snap.meta.Samples = sl.Samples
		}
	}
	return snap, versions, nil
}

// evaluatedModel holds the snapshot this node last evaluated, for
// GET /model.safetensors?evaluated: in memory (snap), or for a model whose
// evaluation borrows the worker's θ (node/worker/lend.go) in a file of the data dir
// (file, evaluatedFile), written while θ was lent. The next evaluation
// reads into snap's memory (take), so an evaluator holds one snapshot of
// the model, not two: while that read runs there is none to serve, unless
// an export was streaming it when the evaluation began — then it is left
// whole and the evaluation reads into new memory.
type evaluatedModel struct {
	mu   sync.RWMutex // held for reading while an export streams snap
	snap *modelSnapshot
	file string // replaced by a rename: an export streaming the old one reads it whole
}

// evaluatedFile is the evaluated snapshot of a large model, in the data dir.
const evaluatedFile = "evaluated.safetensors"

// take removes the snapshot and returns its parameters' memory to read
// the next evaluation into; nil when there is none or one is being served.
func (e *evaluatedModel) take() []float32 {
	if !e.mu.TryLock() {
		return nil
	}
	defer e.mu.Unlock()
	if e.snap == nil {
		return nil
	}
	theta := e.snap.theta
	e.snap = nil
	return theta
}

// set keeps s in memory, or when file is set, says the snapshot is there.
func (e *evaluatedModel) set(s *modelSnapshot, file string) {
	e.mu.Lock()
	e.snap, e.file = s, file
	e.mu.Unlock()
}

// dropMemory drops a snapshot kept in memory but keeps a file: before an
// evaluation that borrows the worker's θ, memory is what it saves, and
// the file stays whole until the next one replaces it by a rename, so
// ?evaluated answers all through the evaluation.
func (e *evaluatedModel) dropMemory() {
	e.mu.Lock()
	e.snap = nil
	e.mu.Unlock()
}

// serve calls f with the snapshot in memory or the path of its file (nil
// and "" if none); the snapshot stays whole until f returns.
func (e *evaluatedModel) serve(f func(*modelSnapshot, string)) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	f(e.snap, e.file)
}

// Export timeouts: the default of GET /model.safetensors and the most a
// caller may ask for with ?timeout=.
const (
	exportTimeout    = 30 * time.Second
	maxExportTimeout = 5 * time.Minute
)

// serveModel answers GET /model.safetensors: a fresh snapshot read from
// every shard's leader, or with ?evaluated the snapshot this node last
// evaluated (404 where it has none).
func (n *Node) serveModel(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Has("evaluated") {
		n.evaluated.serve(func(snap *modelSnapshot, file string) {
			switch {
			case snap != nil:
				n.writeModel(w, snap)
			case file != "":
				n.serveFile(w, r, file)
			default:
				http.Error(w, fmt.Sprintf("node %s holds no evaluated model (the evaluator is %q; the last one is gone while the next evaluation reads the model); ask the evaluator again, or drop ?evaluated for a fresh snapshot", n.id, n.evaluator()), http.StatusNotFound)
			}
		})
		return
	}
	timeout := exportTimeout
	if v := r.URL.Query().Get("timeout"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			http.Error(w, fmt.Sprintf("timeout %q is not a positive duration", v), http.StatusBadRequest)
			return
		}
		timeout = min(d, maxExportTimeout)
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	snap, err := n.readModel(ctx, "export", nil)
	if err != nil {
		http.Error(w, fmt.Sprintf("node %s: %v", n.id, err), http.StatusServiceUnavailable)
		return
	}
	n.writeModel(w, snap)
}

// writeModel answers with snap as a safetensors file, written straight
// from the snapshot with its length counted first: a 100 MB model is not
// encoded into a buffer on the node.
func (n *Node) writeModel(w http.ResponseWriter, snap *modelSnapshot) {
	layout := n.model.Layout()
	size, err := modelfile.Size(layout, snap.theta, snap.meta)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	w.Header().Set("Cache-Control", "no-store")
	bw := bufio.NewWriterSize(w, 1<<20)
	err = modelfile.Encode(bw, layout, snap.theta, snap.meta)
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		// The header is out: all that is left is to say why the body stopped.
		n.log.Warn("model export cut short", "err", err)
	}
}

// serveFile answers with the model file at path, as it is when opened.
func (n *Node) serveFile(w http.ResponseWriter, r *http.Request, path string) {
	f, err := os.Open(path)
	if err != nil {
		http.Error(w, fmt.Sprintf("node %s: the evaluated model: %v", n.id, err), http.StatusInternalServerError)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		http.Error(w, fmt.Sprintf("node %s: the evaluated model: %v", n.id, err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Cache-Control", "no-store")
	http.ServeContent(w, r, "", st.ModTime(), f)
}

// withModel adds GET /model.safetensors to h.
func withModel(h http.Handler, serve http.HandlerFunc) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("GET /model.safetensors", serve)
	return mux
}

// LoadInitFrom reads the parameters of --init-from (spec.InitFrom) for
// spec's model; nil when it is not set. A missing file, another model, a
// tensor whose shape differs or a non-finite value is an error naming it.
// The assembler calls it before anything is written to disk and passes
// the result as Deps.InitParams.
func LoadInitFrom(spec JobSpec) ([]float32, error) {
	if spec.InitFrom == "" {
		return nil, nil
	}
	m, err := cudaops.NewModel(spec.Model, cudaops.ModelOptions{Workers: 1})
	if err != nil {
		return nil, err
	}
	theta, _, err := modelfile.LoadParams(spec.InitFrom, m)
	if err != nil {
		return nil, fmt.Errorf("--init-from: %w", err)
	}
	if !modelfile.Finite(theta) {
		return nil, fmt.Errorf("--init-from %s: parameters are not finite", spec.InitFrom)
	}
	return theta, nil
}

// checkpointer saves the evaluated snapshot every Config.CheckpointEvery
// on the evaluating node.
type checkpointer struct {
	every time.Duration
	dir   *modelfile.Checkpoints
	last  time.Time
}

func openCheckpointer(cfg Config) (*checkpointer, error) {
	if cfg.CheckpointDir == "" {
		return nil, nil
	}
	dir, err := modelfile.OpenCheckpoints(cfg.CheckpointDir, cfg.CheckpointKeep)
	if err != nil {
		return nil, fmt.Errorf("--checkpoint-dir: %w", err)
	}
	return &checkpointer{every: cfg.CheckpointEvery, dir: dir, last: time.Now()}, nil
}

// maybeSave saves snap when a period has passed since the last save.
func (c *checkpointer) maybeSave(n *Node, snap *modelSnapshot) {
	if c == nil || time.Since(c.last) < c.every {
		return
	}
	meta := snap.meta
	meta.Source = "checkpoint"
	path, err := c.dir.Save(n.model.Layout(), snap.theta, meta)
	if err != nil {
		n.log.Warn("checkpoint not written", "clock", meta.Clock, "err", err)
		return
	}
	c.last = time.Now()
	n.log.Info("checkpoint", "path", path, "clock", meta.Clock)
}
