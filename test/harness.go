package test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"dsspmesh/node/launch"
	"dsspmesh/node/records"
	"dsspmesh/node/status"
	"dsspmesh/nodeclient"
)

var (
	buildMu    sync.Mutex
	buildPaths = map[string]string{} // build tags → binary
)

// Binary builds cmd/dssp once per test process into a temporary folder and
// returns its path.
func Binary(t testing.TB) string { return BinaryTags(t, "") }

// BinaryTags is Binary built with -tags tags (e.g. "faultinject"), once per
// set of tags.
func BinaryTags(t testing.TB, tags string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := buildPaths[tags]; ok {
		return p
	}
	dir, err := os.MkdirTemp("", "dssp-bin-*")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "dssp")
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Dir(filepath.Dir(file))
	cmd := exec.Command("go", "build", "-tags", tags, "-o", path, "./cmd/dssp")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags %q ./cmd/dssp: %v\n%s", tags, err, out)
	}
	buildPaths[tags] = path
	return path
}

// Cluster is a mesh of real dssp node processes on loopback, with the
// verbs fault tests are written in: Start, Kill, Restart, Status, WaitFor.
type Cluster struct {
	t        testing.TB
	describe func() string // the mesh's state for a failure message; "" by default
	// crashed, if set, handles a node that exited on its own while WaitFor
	// polls (true: handled, keep waiting); otherwise the test fails.
	crashed func(i int, err error) bool
	// stalled, if set, handles a WaitFor that ran out of time (true:
	// handled, WaitFor returns); otherwise the test fails.
	stalled func(msg string) bool
	// poll, if set, is called on every round of WaitFor (the fault
	// suite's evidence samples the nodes' views through it).
	poll func()
	// tend, if set, is called on every round of WaitFor too (the fault
	// suite's PyTorch trainers are started again through it).
	tend   func()
	Mesh   *launch.Mesh
	killed map[int]bool // nodes killed on purpose and not restarted
}

// NewCluster prepares n nodes (node 0 bootstraps, the others join it by
// seed) with args added to every node and spec to node 0. Every process is
// stopped when the test ends; their logs are printed if it failed.
func NewCluster(t testing.TB, n int, args, spec []string) *Cluster {
	t.Helper()
	return newCluster(t, Binary(t), n, args, spec)
}

func newCluster(t testing.TB, bin string, n int, args, spec []string) *Cluster {
	t.Helper()
	return newClusterOn(t, bin, make([]launch.Host, n), args, spec)
}

// newClusterOn is newCluster with node i on hosts[i] (the link lab's).
func newClusterOn(t testing.TB, bin string, hosts []launch.Host, args, spec []string) *Cluster {
	t.Helper()
	m, err := launch.NewMeshOn(bin, t.TempDir(), hosts, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for i := range m.Procs {
		m.AddArgs(i, args...)
	}
	m.AddArgs(0, spec...)
	c := &Cluster{t: t, Mesh: m, killed: map[int]bool{}, describe: func() string { return "" }}
	t.Cleanup(func() {
		m.Stop(10 * time.Second)
		keep := os.Getenv("DSSP_TEST_LOGS")
		if keep == "" && !t.Failed() {
			return
		}
		prefix := fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "_"), time.Now().Unix())
		for _, p := range m.Procs {
			b, err := os.ReadFile(p.LogPath)
			if err != nil {
				continue
			}
			if keep != "" {
				os.WriteFile(filepath.Join(keep, fmt.Sprintf("%s-node%d.log", prefix, p.Index)), b, 0o644)
			}
			if !t.Failed() {
				continue
			}
			t.Logf("node%d log tail: %s", p.Index, launch.LogTail(p.LogPath, 15))
			if i := bytes.LastIndex(b, []byte("\npanic: ")); i >= 0 {
				// A crash's cause and the lines before it, past the tail
				// its goroutine dump fills.
				from := max(0, bytes.LastIndex(b[:max(0, i-2000)], []byte("\n")))
				t.Logf("node%d crashed: %s", p.Index, strings.ReplaceAll(string(b[from:min(len(b), i+600)]), "\n", " | "))
			}
		}
	})
	return c
}

// Start starts node i and waits until its /status answers.
func (c *Cluster) Start(i int) {
	c.t.Helper()
	if err := c.Mesh.Start(i); err != nil {
		c.t.Fatal(err)
	}
	c.WaitFor(fmt.Sprintf("node%d answers /status", i), 60*time.Second, func() bool {
		_, err := c.Status(i)
		return err == nil
	})
}

// Kill sends SIGKILL to node i.
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	if err := c.Mesh.Kill(i); err != nil {
		c.t.Fatal(err)
	}
	c.killed[i] = true
}

// Restart starts node i again on the same data dir and ports.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	delete(c.killed, i)
	if c.Mesh.Procs[i].Alive() {
		return // a stall recovery restarted every node meanwhile
	}
	c.Start(i)
}

// Status reads node i's /status.
func (c *Cluster) Status(i int) (status.Status, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return nodeclient.FetchStatus(ctx, c.Mesh.Procs[i].HTTP)
}

// Statuses reads every live node's /status (nil for a node that is down
// or does not answer).
func (c *Cluster) Statuses() []*status.Status {
	out := make([]*status.Status, len(c.Mesh.Procs))
	for i, p := range c.Mesh.Procs {
		if !p.Alive() {
			continue
		}
		if s, err := c.Status(i); err == nil {
			out[i] = &s
		}
	}
	return out
}

// WaitFor polls cond until it holds, failing the test after limit; it
// returns how long it took. A node exiting on its own fails the test at
// once.
func (c *Cluster) WaitFor(what string, limit time.Duration, cond func() bool) time.Duration {
	c.t.Helper()
	start := time.Now()
	for !cond() {
		if c.poll != nil {
			c.poll()
		}
		if c.tend != nil {
			c.tend()
		}
		for i := range c.Mesh.Procs {
			if err := c.Mesh.Exited(i); err != nil && !c.killed[i] {
				if c.crashed == nil || !c.crashed(i, err) {
					c.t.Fatalf("waiting for %s: %v", what, err)
				}
			}
		}
		if time.Since(start) > limit {
			msg := fmt.Sprintf("%s: not within %v%s", what, limit, c.describe())
			if c.stalled == nil || !c.stalled(msg) {
				c.t.Fatal(msg)
			}
			return time.Since(start)
		}
		time.Sleep(250 * time.Millisecond)
	}
	return time.Since(start)
}

// Rejoined reports whether node i answers as id with at least iters
// worker iterations done and some node's clock table lists id again.
func (c *Cluster) Rejoined(i int, id string, iters uint64) bool {
	s, err := c.Status(i)
	if err != nil || s.Node != id || s.Worker == nil || s.Worker.Iter < iters {
		return false
	}
	return c.listedBy(id)
}

// listedBy reports whether any live node's clock table lists id.
func (c *Cluster) listedBy(id string) bool {
	for _, s := range c.Statuses() {
		for _, w := range workersOf(s) { // nil: a node that does not answer
			if w.ID == id {
				return true
			}
		}
	}
	return false
}

// Iter is node i's worker iteration (-1 if it does not answer).
func (c *Cluster) Iter(i int) int64 {
	s, err := c.Status(i)
	if err != nil || s.Worker == nil {
		return -1
	}
	return int64(s.Worker.Iter)
}

// Leaders merges every node's view: shard id → the node index whose
// replica says it leads.
func Leaders(st []*status.Status) map[uint32]int {
	out := map[uint32]int{}
	for i, s := range st {
		if s == nil {
			continue
		}
		for _, sh := range s.Shards {
			if sh.Local == "leader" {
				out[sh.ID] = i
			}
		}
	}
	return out
}

// Accuracy is the latest evaluation any node reports, by the mesh's
// sequence (nil if none).
func Accuracy(st []*status.Status) *records.EvalResult {
	var best *records.EvalResult
	for _, s := range st {
		if s != nil && s.Eval != nil && (best == nil || s.Eval.Seq > best.Seq || s.Eval.Seq == best.Seq && s.Eval.At.After(best.At)) {
			best = s.Eval
		}
	}
	return best
}

// longTest skips t unless DSSP_LONG=1: the multi-process tests that are
// not in CI's time (scripts/test stays under 20 minutes on 2 cores), run
// with `DSSP_LONG=1 go test ./test -run <name>`; test/doc.go lists them.
func longTest(t *testing.T) {
	t.Helper()
	if os.Getenv("DSSP_LONG") != "1" {
		t.Skip("a long test: run it with DSSP_LONG=1 (test/doc.go)")
	}
}
