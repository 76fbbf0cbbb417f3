package modelfile

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"dsspmesh/cudaops"
)

// ErrNotFinite is returned by [Checkpoints.Save] for parameters or an
// evaluation loss that are NaN or infinite.
var ErrNotFinite = errors.New("not finite")

const (
	ckptPrefix = "ckpt-"
	ckptSuffix = ".safetensors"
	ckptTime   = "20060102T150405.000Z"
)

// Checkpoints is a folder of periodic model files; see the package doc.
type Checkpoints struct {
	dir  string
	keep int

	mu     sync.Mutex // serialises Save and pruning
	latest string
}

// OpenCheckpoints creates dir if needed and removes temporary files a
// crash left there. keep is how many checkpoints Save keeps (>= 1).
func OpenCheckpoints(dir string, keep int) (*Checkpoints, error) {
	if dir == "" {
		return nil, errors.New("modelfile: checkpoint folder is empty")
	}
	if keep < 1 {
		return nil, fmt.Errorf("modelfile: keep %d checkpoints: must be >= 1", keep)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("modelfile: checkpoint folder: %w", err)
	}
	stale, _ := filepath.Glob(filepath.Join(dir, ".tmp-"+ckptPrefix+"*"))
	for _, p := range stale {
		os.Remove(p)
	}
	c := &Checkpoints{dir: dir, keep: keep}
	if names, err := c.List(); err == nil && len(names) > 0 {
		c.latest = names[len(names)-1]
	}
	return c, nil
}

// Save writes theta and meta as a new checkpoint (atomically), then
// removes the oldest beyond keep. It refuses non-finite parameters or
// evaluation loss with an error wrapping ErrNotFinite and writes nothing.
func (c *Checkpoints) Save(layout cudaops.Layout, theta []float32, meta Meta) (string, error) {
	if !Finite(theta) {
		return "", fmt.Errorf("modelfile: checkpoint at clock %d: parameters %w", meta.Clock, ErrNotFinite)
	}
	if e := meta.Eval; e != nil && (math.IsNaN(e.Loss) || math.IsInf(e.Loss, 0)) {
		return "", fmt.Errorf("modelfile: checkpoint at clock %d: evaluation loss %v %w", meta.Clock, e.Loss, ErrNotFinite)
	}
	if meta.TakenAt.IsZero() {
		meta.TakenAt = time.Now()
	}
	name := fmt.Sprintf("%s%s-c%010d%s", ckptPrefix, meta.TakenAt.UTC().Format(ckptTime), max(meta.Clock, 0), ckptSuffix)
	path := filepath.Join(c.dir, name)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := WriteFile(path, layout, theta, meta); err != nil {
		return "", err
	}
	c.latest = path
	names, err := c.List()
	if err != nil {
		return path, err
	}
	var errs []error
	for _, old := range names[:max(len(names)-c.keep, 0)] {
		if old == path {
			continue
		}
		if err := os.Remove(old); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return path, errors.Join(errs...)
}

// Latest is the newest checkpoint's path — the last good one, since Save
// refuses non-finite ones — and false when there is none.
func (c *Checkpoints) Latest() (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.latest, c.latest != ""
}

// List returns the checkpoints' paths, oldest first.
func (c *Checkpoints) List() ([]string, error) {
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return nil, fmt.Errorf("modelfile: checkpoint folder: %w", err)
	}
	var out []string
	for _, e := range entries {
		if n := e.Name(); e.Type().IsRegular() && strings.HasPrefix(n, ckptPrefix) && strings.HasSuffix(n, ckptSuffix) {
			out = append(out, filepath.Join(c.dir, n))
		}
	}
	slices.Sort(out)
	return out, nil
}
