package raftstore

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"go.etcd.io/bbolt"
)

// compactIfSparse rewrites the bbolt file at path compactly when it is
// larger than at bytes and its free pages are at least half of it. bbolt
// never shrinks a file: pages freed when raft deletes the log's prefix are
// reused by later appends, so the file stays as large as the largest log it
// ever held. A log bounded by bytes (shard.Config.LogBytes) keeps that
// small in a run; this gives back the space of a larger past (an older
// dssp's count-based bounds, a follower that lagged long).
//
// Crash safety: the copy is written and fsynced beside the file
// (raft.db.compact) and renamed over it, then the folder is fsynced; a
// crash before the rename leaves the original and a stale copy that the
// next Open removes, after it the compact copy. The database is opened with
// opts, whose Timeout bounds the wait for its lock.
func compactIfSparse(path string, at int64, opts *bbolt.Options, logger *slog.Logger) error {
	tmp := path + ".compact"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale %s: %w", tmp, err)
	}
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Size() <= at {
		return nil
	}
	src, err := bbolt.Open(path, 0o600, opts)
	if err != nil {
		if errors.Is(err, bbolt.ErrTimeout) {
			err = fmt.Errorf("%w: another process holds it open (waited %v)", err, opts.Timeout)
		}
		return fmt.Errorf("open log %s to compact: %w", path, err)
	}
	free := int64(src.Stats().FreePageN) * int64(src.Info().PageSize)
	if free*2 < fi.Size() {
		return src.Close()
	}
	dst, err := bbolt.Open(tmp, 0o600, &bbolt.Options{Timeout: opts.Timeout, NoFreelistSync: opts.NoFreelistSync, FreelistType: opts.FreelistType})
	if err != nil {
		return errors.Join(fmt.Errorf("create %s: %w", tmp, err), src.Close())
	}
	err = bbolt.Compact(dst, src, 64<<20)
	err = errors.Join(err, dst.Close(), src.Close())
	if err == nil {
		err = syncFile(tmp)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncFile(filepath.Dir(path))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("compact log %s: %w", path, err)
	}
	after := int64(0)
	if fi, err := os.Stat(path); err == nil {
		after = fi.Size()
	}
	logger.Info("raftstore: compacted the log database", "path", path, "bytes_before", fi.Size(), "bytes_after", after)
	return nil
}

// syncFile fsyncs a file or folder.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}
