package raftstore

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"go.etcd.io/bbolt"
)

// Config tunes the on-disk stores of one shard.
type Config struct {
	// RetainSnapshots is how many snapshots are kept on disk; at least 1.
	RetainSnapshots int
	// LogCacheBytes bounds the newest log entries kept in memory in front
	// of the log store (by their bytes, see byteCache); 0 disables it.
	// Without it raft reads every entry back from disk once per follower
	// it replicates to and once more on each follower to apply it (a read
	// and a decoding copy of the entry, on the path of every push). It
	// pins at most LogCacheBytes of memory per shard.
	LogCacheBytes int64
	// CompactAt: on Open, a log database file larger than this whose live
	// pages fill less than half of it is rewritten compactly first (see
	// compactIfSparse); 0 never compacts. Pages raft frees when it drops
	// the log's prefix after a snapshot are reused by later appends, so a
	// file only grows to the largest log it held; this returns the space of
	// a log that was once larger (older bounds, a long partition).
	CompactAt int64
	// OpenTimeout bounds the wait for the log database's file lock, held
	// while another process (or a replica not yet closed) has it open.
	OpenTimeout time.Duration
}

// DefaultConfig returns the settings the node uses.
func DefaultConfig() Config {
	return Config{RetainSnapshots: 2, LogCacheBytes: 8 << 20, CompactAt: 32 << 20, OpenTimeout: 5 * time.Second}
}

// Validate reports the first bad field, naming its value.
func (c Config) Validate() error {
	if c.RetainSnapshots < 1 {
		return fmt.Errorf("raftstore: RetainSnapshots (%d) must be at least 1", c.RetainSnapshots)
	}
	if c.LogCacheBytes < 0 {
		return fmt.Errorf("raftstore: LogCacheBytes (%d) must not be negative", c.LogCacheBytes)
	}
	if c.CompactAt < 0 {
		return fmt.Errorf("raftstore: CompactAt (%d) must not be negative", c.CompactAt)
	}
	if c.OpenTimeout <= 0 {
		return fmt.Errorf("raftstore: OpenTimeout (%v) must be positive", c.OpenTimeout)
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

// SetDamaged has the log store tell f of every entry whose checksum
// fails when it is read (a damaged disk: see checkEntry); f must not
// block. In-memory stores damage nothing.
func (s *Stores) SetDamaged(f func(index uint64, err error)) {
	if b, ok := s.closer.(*boltLog); ok {
		b.damaged.Store(&f)
	}
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
// dataDir. Every log append and stable-store write is fsynced before it
// returns; a database left by a crash is recovered by bbolt on open.
func Open(dataDir string, shard uint32, cfg Config, logger *slog.Logger) (*Stores, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	dir := ShardDir(dataDir, shard)
	switch fi, err := os.Stat(dir); {
	case errors.Is(err, os.ErrNotExist):
		if err := createShardDir(dir, boltOptions(cfg)); err != nil {
			return nil, fmt.Errorf("raftstore: shard %d: create %s: %w", shard, dir, err)
		}
	case err != nil:
		return nil, fmt.Errorf("raftstore: shard %d: %w", shard, err)
	case !fi.IsDir():
		return nil, fmt.Errorf("raftstore: shard %d: %s is not a folder", shard, dir)
	}
	// Data dirs of dssp before this store kept a raft-wal log in wal/; its
	// entries cannot be read here, and starting empty beside it would look
	// like a replica that lost its log.
	if _, err := os.Stat(filepath.Join(dir, "wal")); err == nil {
		return nil, fmt.Errorf("raftstore: shard %d: %s holds a raft-wal log from an older dssp, which this version cannot read; remove the data dir to start the node afresh", shard, dir)
	}
	// A missing, empty or damaged log is refused before bbolt maps it (see
	// "Storage integrity" in the package doc).
	if err := checkShardDir(shard, dir, cfg.OpenTimeout); err != nil {
		var de *DamagedError
		if errors.As(err, &de) {
			return nil, err
		}
		return nil, fmt.Errorf("raftstore: shard %d: %w", shard, err)
	}
	path := filepath.Join(dir, "raft.db")
	if cfg.CompactAt > 0 {
		if err := compactIfSparse(path, cfg.CompactAt, boltOptions(cfg), logger); err != nil {
			return nil, fmt.Errorf("raftstore: shard %d: %w", shard, err)
		}
	}
	db, err := openBoltLog(path, boltOptions(cfg))
	if err != nil {
		if errors.Is(err, bbolt.ErrTimeout) {
			err = fmt.Errorf("%w: another process holds it open (waited %v)", err, cfg.OpenTimeout)
		}
		return nil, fmt.Errorf("raftstore: shard %d: open log %s: %w", shard, path, err)
	}
	if err := removeUnfinishedSnapshots(filepath.Join(dir, "snapshots"), logger.With("shard", shard)); err != nil {
		return nil, errors.Join(fmt.Errorf("raftstore: shard %d: %w", shard, err), db.Close())
	}
	hl := HCLogger(logger.With("shard", shard), "raftstore")
	// raft's file snapshot store nests its own "snapshots" folder under dir.
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, cfg.RetainSnapshots, hl)
	if err != nil {
		return nil, errors.Join(
			fmt.Errorf("raftstore: shard %d: open snapshots in %s: %w", shard, filepath.Join(dir, "snapshots"), err),
			db.Close())
	}
	var log raft.LogStore = db
	if cfg.LogCacheBytes > 0 {
		if log, err = newByteCache(cfg.LogCacheBytes, db); err != nil {
			return nil, errors.Join(fmt.Errorf("raftstore: shard %d: log cache: %w", shard, err), db.Close())
		}
	}
	return &Stores{Log: log, Stable: db, Snapshots: &sumStore{FileSnapshotStore: snaps, dir: filepath.Join(dir, "snapshots")}, closer: db}, nil
}

func boltOptions(cfg Config) *bbolt.Options {
	return &bbolt.Options{
		Timeout: cfg.OpenTimeout,
		// The freelist is rebuilt on open instead of written on every
		// commit, and kept as a map: raft deletes a prefix of large
		// entries after each snapshot, which leaves many free pages.
		NoFreelistSync: true,
		FreelistType:   bbolt.FreelistMapType,
	}
}

// NewInmem returns in-memory stores with the same contract, for tests.
func NewInmem() *Stores {
	m := raft.NewInmemStore()
	return &Stores{Log: m, Stable: m, Snapshots: raft.NewInmemSnapshotStore()}
}

// removeUnfinishedSnapshots removes the snapshot folders a killed process
// left half-written (raft's "<id>.tmp", renamed to "<id>" only once
// complete). raft's file store skips them but never removes them, and
// warned of each on every listing (three times in a restart). The caller
// holds the shard's bbolt lock, so no other process writes them.
func removeUnfinishedSnapshots(dir string, logger *slog.Logger) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("remove the unfinished snapshot %s: %w", e.Name(), err)
		}
		logger.Info("raftstore: removed an unfinished snapshot (its process stopped while writing it)", "name", e.Name())
	}
	return nil
}
