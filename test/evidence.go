package test

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Evidence keeps, for each fault that recovered slowly, what the nodes
// said around it, so a tail in the figures can be analysed after a long
// run without keeping every node's whole log and history: each node's log
// from the moment the fault began to the moment the mesh was healthy
// again (at most evidenceLogCap bytes per node: its head and its tail),
// and a timeline of every node's view (Describe: members, each shard's
// leader, term, role and voters, the worker's iteration and error, the
// clock table) sampled about once a second while the harness waited.
// A fast fault's window is dropped, so the cost is a few kilobytes per
// slow fault.
//
// The fault loop calls Begin before a fault and End with its event after
// it; WaitFor samples the timeline through Cluster.poll.
type Evidence struct {
	c *FaultCluster
	// Dir is where slow faults' windows go, one folder each ("" keeps
	// none); Slow is the threshold on the recovery after the fault was
	// lifted (Event.afterLift).
	Dir  string
	Slow time.Duration

	n       int // faults begun, for the folder names
	begun   time.Time
	offsets []int64
	lines   strings.Builder
	last    time.Time
	Kept    []string // the folders written
}

// evidenceLogCap bounds the log window kept per node and fault.
const evidenceLogCap = 2 << 20

// NewEvidence keeps slow faults' windows under dir (created on first use).
func (c *FaultCluster) NewEvidence(dir string, slow time.Duration) *Evidence {
	ev := &Evidence{c: c, Dir: dir, Slow: slow}
	c.poll = ev.sample
	return ev
}

// Begin starts a fault's window: it notes where each node's log ends.
func (ev *Evidence) Begin() {
	ev.n++
	ev.begun = time.Now()
	ev.offsets = make([]int64, len(ev.c.Mesh.Procs))
	for i, p := range ev.c.Mesh.Procs {
		if fi, err := os.Stat(p.LogPath); err == nil {
			ev.offsets[i] = fi.Size()
		}
	}
	ev.lines.Reset()
	ev.last = time.Time{}
	ev.sample()
}

// sample adds every node's view to the timeline, at most once a second.
func (ev *Evidence) sample() {
	if ev.begun.IsZero() || time.Since(ev.last) < time.Second {
		return
	}
	ev.last = time.Now()
	fmt.Fprintf(&ev.lines, "%s +%.1fs%s\n", ev.last.Format("15:04:05.000"), ev.last.Sub(ev.begun).Seconds(), ev.c.Describe())
}

// End closes the fault's window and keeps it if the recovery after the
// lift took Slow or longer; it returns the folder ("" if dropped).
func (ev *Evidence) End(e Event) string {
	defer func() { ev.begun = time.Time{} }()
	if ev.Dir == "" || ev.begun.IsZero() || e.afterLift() < ev.Slow {
		return ""
	}
	ev.sample()
	dir := filepath.Join(ev.Dir, fmt.Sprintf("%03d-%s", ev.n, strings.NewReplacer(" ", "-", "+", "-").Replace(e.Kind)))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		ev.c.t.Logf("evidence: %v", err)
		return ""
	}
	var sum strings.Builder
	fmt.Fprintf(&sum, "%s victims %v (ids %v)\nbegan %s, lifted %s, healthy %s later (%s after the lift)\ndetect %v elect %v recover %v\n",
		e.Kind, e.Victims, ev.ids(e.Victims), e.At.Format("15:04:05.000"), fmtTime(e.End), e.Recover, e.afterLift(), e.Detect, e.Elect, e.Recover)
	os.WriteFile(filepath.Join(dir, "event.txt"), []byte(sum.String()), 0o644)
	os.WriteFile(filepath.Join(dir, "timeline.txt"), []byte(ev.lines.String()), 0o644)
	for i, p := range ev.c.Mesh.Procs {
		if b, err := logWindow(p.LogPath, ev.offsets[i], evidenceLogCap); err == nil {
			os.WriteFile(filepath.Join(dir, fmt.Sprintf("node%d.log", i)), b, 0o644)
		}
	}
	ev.Kept = append(ev.Kept, dir)
	return dir
}

func (ev *Evidence) ids(nodes []int) []string {
	var out []string
	for _, i := range nodes {
		if i >= 0 && i < len(ev.c.IDs) {
			out = append(out, ev.c.IDs[i])
		}
	}
	return out
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Format("15:04:05.000")
}

// logWindow is the file from offset on, at most limit bytes: its first
// and last halves around a marker when longer. A file shorter than offset
// (replaced) is read from its start.
func logWindow(path string, offset int64, limit int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() < offset {
		offset = 0
	}
	n := fi.Size() - offset
	if n <= int64(limit) {
		b := make([]byte, n)
		_, err := io.ReadFull(io.NewSectionReader(f, offset, n), b)
		return b, err
	}
	head := make([]byte, limit/2)
	tail := make([]byte, limit/2)
	if _, err := f.ReadAt(head, offset); err != nil {
		return nil, err
	}
	if _, err := f.ReadAt(tail, fi.Size()-int64(len(tail))); err != nil && err != io.EOF {
		return nil, err
	}
	mid := fmt.Sprintf("\n[… %d bytes left out …]\n", n-int64(limit))
	return append(append(head, mid...), tail...), nil
}

// evidenceDir is a folder for t's evidence outside its temporary folders
// (removed when the test ends).
func evidenceDir(t testing.TB) string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("dssp-evidence-%s-%d", strings.ReplaceAll(t.Name(), "/", "_"), time.Now().Unix()))
}
