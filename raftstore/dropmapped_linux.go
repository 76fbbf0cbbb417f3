package raftstore

import (
	"syscall"

	"go.etcd.io/bbolt"
)

// dropMapped unmaps the pages of db's file mapping from this process
// (madvise MADV_DONTNEED). bbolt maps the file shared and read-only, so
// this only drops page-table entries: the data stays in the page cache and
// on disk, and the next read faults it back in. tx must be open: it holds
// bbolt's mmap lock, so the mapping cannot move while this runs, and its
// size (the file's high-water mark) is within the mapping.
func dropMapped(db *bbolt.DB, tx *bbolt.Tx) {
	data, size := db.Info().Data, tx.Size()
	if data == 0 || size <= 0 {
		return
	}
	syscall.Syscall(syscall.SYS_MADVISE, data, uintptr(size), syscall.MADV_DONTNEED)
}
