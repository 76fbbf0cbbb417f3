package raftstore

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
)

// Config tunes the on-disk stores of one shard.
type Config struct {
	// SegmentSize is the size in bytes at which raft-wal starts a new
	// segment file. Smaller segments let truncation after a snapshot free
	// space sooner when entries are large (pushes of megabytes).
	SegmentSize int
	// RetainSnapshots is how many snapshots are kept on disk; at least 1.
	RetainSnapshots int
	// LogCache is how many of the newest log entries are kept in memory in
	// front of the WAL (raft.NewLogCache); 0 disables it. Without it raft
	// reads every entry back from disk once per follower it replicates to
	// and once more on each follower to apply it (a pread and a decoding
	// copy of megabytes, on the path of every push). It pins about
	// LogCache × entry size of memory per shard.
	LogCache int
}

// DefaultConfig returns the settings the node uses.
func DefaultConfig() Config {
	return Config{SegmentSize: 16 << 20, RetainSnapshots: 2, LogCache: 32}
}

// Validate reports the first bad field, naming its value.
func (c Config) Validate() error {
	if c.SegmentSize < 1<<20 || c.SegmentSize > 1<<30 {
		return fmt.Errorf("raftstore: SegmentSize (%d) must be between 1 MiB and 1 GiB", c.SegmentSize)
	}
	if c.RetainSnapshots < 1 {
		return fmt.Errorf("raftstore: RetainSnapshots (%d) must be at least 1", c.RetainSnapshots)
	}
	if c.LogCache < 0 {
		return fmt.Errorf("raftstore: LogCache (%d) must not be negative", c.LogCache)
	}
	return nil
}

// Stores bundles the three stores raft.NewRaft takes for one shard.
type Stores struct {
	Log       raft.LogStore
	Stable    raft.StableStore
	Snapshots raft.SnapshotStore

	closer io.Closer
}

// Close releases files held by the stores. Call it after raft has shut down.
func (s *Stores) Close() error {
	if s.closer == nil {
		return nil
	}
	c := s.closer
	s.closer = nil
	return c.Close()
}

// ShardDir is the folder that holds one shard's stores under dataDir.
func ShardDir(dataDir string, shard uint32) string {
	return filepath.Join(dataDir, "shards", strconv.FormatUint(uint64(shard), 10))
}

// Open opens (creating if needed) the disk stores of one shard under
// dataDir. A WAL left by a crash is recovered by raft-wal.
func Open(dataDir string, shard uint32, cfg Config, logger *slog.Logger) (*Stores, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	dir := ShardDir(dataDir, shard)
	walDir := filepath.Join(dir, "wal")
	snapDir := filepath.Join(dir, "snapshots")
	for _, d := range []string{walDir, snapDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("raftstore: shard %d: create %s: %w", shard, d, err)
		}
	}
	hl := HCLogger(logger.With("shard", shard), "raftstore")
	// raft-wal v0.4.0's Close leaves its meta database open (and its file
	// lock held, so a reopen in the same process blocks): we own and close it.
	meta := &metadb.BoltMetaDB{}
	w, err := wal.Open(walDir, wal.WithSegmentSize(cfg.SegmentSize), wal.WithLogger(hl), wal.WithMetaStore(meta), wal.WithSegmentFiler(newSealFixFiler(walDir)))
	if err != nil {
		return nil, errors.Join(
			fmt.Errorf("raftstore: shard %d: open WAL in %s: %w", shard, walDir, err),
			meta.Close())
	}
	closer := closeAll{w, meta}
	// raft's file snapshot store nests its own "snapshots" folder under base.
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, cfg.RetainSnapshots, hl)
	if err != nil {
		return nil, errors.Join(
			fmt.Errorf("raftstore: shard %d: open snapshots in %s: %w", shard, snapDir, err),
			closer.Close())
	}
	var log raft.LogStore = w
	if cfg.LogCache > 0 {
		if log, err = raft.NewLogCache(cfg.LogCache, w); err != nil {
			return nil, errors.Join(fmt.Errorf("raftstore: shard %d: log cache: %w", shard, err), closer.Close())
		}
	}
	return &Stores{Log: log, Stable: w, Snapshots: snaps, closer: closer}, nil
}

// NewInmem returns in-memory stores with the same contract, for tests.
func NewInmem() *Stores {
	m := raft.NewInmemStore()
	return &Stores{Log: m, Stable: m, Snapshots: raft.NewInmemSnapshotStore()}
}

// closeAll closes each in order and joins their errors.
type closeAll []io.Closer

func (cs closeAll) Close() error {
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
