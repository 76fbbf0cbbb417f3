//go:build !linux

package raftstore

import "go.etcd.io/bbolt"

// dropMapped does nothing where madvise is not used (see the Linux one).
func dropMapped(*bbolt.DB, *bbolt.Tx) {}
