package eval

import (
	"fmt"
	"log/slog"
	"time"

	"dsspmesh/cudaops"
	"dsspmesh/modelfile"
)

// Checkpointer saves the evaluated snapshot every --checkpoint-every on
// the evaluating node.
type Checkpointer struct {
	every time.Duration
	dir   *modelfile.Checkpoints
	last  time.Time
}

// OpenCheckpointer opens --checkpoint-dir (dir, keeping keep) for a save
// every every; nil without a dir.
func OpenCheckpointer(dir string, keep int, every time.Duration) (*Checkpointer, error) {
	if dir == "" {
		return nil, nil
	}
	d, err := modelfile.OpenCheckpoints(dir, keep)
	if err != nil {
		return nil, fmt.Errorf("--checkpoint-dir: %w", err)
	}
	return &Checkpointer{every: every, dir: d, last: time.Now()}, nil
}

// maybeSave saves snap when a period has passed since the last save.
func (c *Checkpointer) maybeSave(layout cudaops.Layout, log *slog.Logger, snap *Snapshot) {
	if c == nil || time.Since(c.last) < c.every {
		return
	}
	meta := snap.Meta
	meta.Source = "checkpoint"
	path, err := c.dir.Save(layout, snap.Theta, meta)
	if err != nil {
		log.Warn("checkpoint not written", "clock", meta.Clock, "err", err)
		return
	}
	c.last = time.Now()
	log.Info("checkpoint", "path", path, "clock", meta.Clock)
}
