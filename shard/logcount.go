package shard

import (
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// countingLog counts the writes to a replica's raft log: each StoreLog or
// StoreLogs call is one transaction, fsynced on raftstore's disk stores,
// however many entries it holds (raft's group commit). It adds no
// locking; the counter is read by Status.
type countingLog struct {
	raft.LogStore
	writes atomic.Uint64
}

func (l *countingLog) StoreLog(e *raft.Log) error {
	l.writes.Add(1)
	return l.LogStore.StoreLog(e)
}

func (l *countingLog) StoreLogs(es []*raft.Log) error {
	l.writes.Add(1)
	return l.LogStore.StoreLogs(es)
}
