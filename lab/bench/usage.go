package bench

import (
	"bufio"
	"bytes"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// NodeUsage is what one node process of a local mesh held: its peak
// resident memory (the kernel's VmHWM, so a peak between two polls is not
// missed) and its data dir's bytes, the largest seen while it ran and the
// size after the mesh stopped.
type NodeUsage struct {
	Node        string // its data dir's name under the run folder (node0, node1, …)
	PeakRSS     int64
	PeakDataDir int64
	DataDir     int64 // after the run
}

// usageWatch polls the node processes this process started whose
// --data-dir lies under dir. It reads only /proc and the data dirs, so it
// measures any dssp binary, today's or a baseline's, alike.
type usageWatch struct {
	dir  string
	stop chan struct{}
	done chan struct{}

	mu    sync.Mutex
	nodes map[string]*NodeUsage
}

func watchUsage(dir string, every time.Duration) *usageWatch {
	w := &usageWatch{dir: filepath.Clean(dir), stop: make(chan struct{}), done: make(chan struct{}), nodes: map[string]*NodeUsage{}}
	go func() {
		defer close(w.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			w.poll()
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
		}
	}()
	return w
}

// finish stops polling and measures every data dir once more, now that
// its node has stopped. The result is sorted by node name.
func (w *usageWatch) finish() []NodeUsage {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []NodeUsage
	for name, size := range nodeDataDirs(w.dir) {
		u := w.node(name)
		u.DataDir = size
		u.PeakDataDir = max(u.PeakDataDir, u.DataDir)
		out = append(out, *u)
	}
	return out
}

// nodeDataDirs is the size of each node's data dir (node0, node1, …)
// under a launcher's run folder, in the order of their names.
func nodeDataDirs(dir string) iter.Seq2[string, int64] {
	return func(yield func(string, int64) bool) {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if !e.IsDir() || !strings.HasPrefix(e.Name(), "node") {
				continue
			}
			if !yield(e.Name(), dirBytes(filepath.Join(dir, e.Name()))) {
				return
			}
		}
	}
}

func (w *usageWatch) node(name string) *NodeUsage {
	u := w.nodes[name]
	if u == nil {
		u = &NodeUsage{Node: name}
		w.nodes[name] = u
	}
	return u
}

func (w *usageWatch) poll() {
	procs, _ := os.ReadDir("/proc")
	self := strconv.Itoa(os.Getpid())
	for _, p := range procs {
		pid := p.Name()
		if pid[0] < '0' || pid[0] > '9' || parentOf(pid) != self {
			continue
		}
		data := dataDirOf(pid)
		if data == "" || filepath.Dir(filepath.Clean(data)) != w.dir {
			continue
		}
		rss := peakRSS(pid)
		size := dirBytes(data)
		w.mu.Lock()
		u := w.node(filepath.Base(data))
		u.PeakRSS = max(u.PeakRSS, rss)
		u.PeakDataDir = max(u.PeakDataDir, size)
		w.mu.Unlock()
	}
}

// parentOf is the parent pid in /proc/pid/stat ("" if unreadable). The
// command name, field 2, is in parentheses and may hold spaces.
func parentOf(pid string) string {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return ""
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return ""
	}
	return f[1]
}

// dataDirOf is the value of the process's --data-dir flag ("" if none).
func dataDirOf(pid string) string {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "cmdline"))
	if err != nil {
		return ""
	}
	args := strings.Split(string(b), "\x00")
	for i, a := range args {
		if a == "--data-dir" && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, "--data-dir="); ok {
			return v
		}
	}
	return ""
}

// peakRSS is VmHWM of /proc/pid/status in bytes (0 if unreadable).
func peakRSS(pid string) int64 {
	f, err := os.Open(filepath.Join("/proc", pid, "status"))
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// dirBytes is the bytes of the regular files under dir (their length, not
// their blocks: bbolt files are not sparse).
func dirBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// maxUsage is the largest of each figure over nodes.
func maxUsage(nodes []NodeUsage) (rss, peakDir, dir int64) {
	for _, u := range nodes {
		rss, peakDir, dir = max(rss, u.PeakRSS), max(peakDir, u.PeakDataDir), max(dir, u.DataDir)
	}
	return
}
