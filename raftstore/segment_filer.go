package raftstore

import (
	"time"

	"github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

// sealFixFiler works around hashicorp/raft-wal#31 in v0.4.0 (the only
// version the module proxy serves; the fix, #33, is unreleased): a tail
// truncation — raft dropping a follower's conflicting suffix after a leader
// change — records the tail segment as sealed without writing its index
// block, so after a restart every read of it fails ("sealed segment has no
// index block") and raft.NewRaft panics. Such a segment is opened the way
// raft-wal opens an unsealed tail, by scanning its frames; the WAL's own
// metadata still bounds it at the truncation point, so entries past
// MaxIndex that remain in the file are never served.
type sealFixFiler struct {
	*segment.Filer
}

func newSealFixFiler(dir string) sealFixFiler {
	return sealFixFiler{segment.NewFiler(dir, fs.New())}
}

func (f sealFixFiler) Open(info types.SegmentInfo) (types.SegmentReader, error) {
	if info.SealTime.IsZero() || info.IndexStart != 0 {
		return f.Filer.Open(info)
	}
	unsealed := info
	unsealed.SealTime = time.Time{}
	return f.Filer.RecoverTail(unsealed)
}
