package raftstore

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
)

// TestDeleteRangeLeavesNoEntry: a range deleted — a compacted prefix, a
// conflicting suffix, of small entries, of entries large enough to get a
// bucket each, and of both mixed — holds no entry afterwards, and every
// entry outside it is still there. DeleteRange deletes through a cursor
// while it walks; bbolt's cursor skips the key after a deleted one when
// the walk runs over a node already written in the transaction, which
// would leave every other entry behind (a stale FirstIndex after a
// compaction; after a suffix rewrite, old-term entries past the new ones).
func TestDeleteRangeLeavesNoEntry(t *testing.T) {
	small := func(i uint64) []byte { return fmt.Appendf(nil, "entry %d", i) }
	large := func(i uint64) []byte { return bytes.Repeat([]byte{byte(i)}, bigEntry+1) }
	mixed := func(i uint64) []byte {
		if i%3 == 0 {
			return large(i)
		}
		return small(i)
	}
	for _, tc := range []struct {
		name     string
		data     func(uint64) []byte
		min, max uint64
	}{
		{"small prefix", small, 1, 300},
		{"small suffix", small, 150, 400},
		{"large prefix", large, 1, 30},
		{"mixed prefix", mixed, 1, 200},
		{"mixed suffix", mixed, 101, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := uint64(400)
			if tc.name == "large prefix" {
				n = 40
			}
			s, err := Open(t.TempDir(), 1, DefaultConfig(), testLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var logs []*raft.Log
			for i := uint64(1); i <= n; i++ {
				logs = append(logs, &raft.Log{Index: i, Term: 2, Type: raft.LogCommand, Data: tc.data(i)})
			}
			if err := s.Log.StoreLogs(logs); err != nil {
				t.Fatal(err)
			}
			if err := s.Log.DeleteRange(tc.min, tc.max); err != nil {
				t.Fatal(err)
			}
			var left []uint64
			for i := uint64(1); i <= n; i++ {
				var l raft.Log
				err := s.Log.GetLog(i, &l)
				gone := errors.Is(err, raft.ErrLogNotFound)
				if err != nil && !gone {
					t.Fatalf("get %d: %v", i, err)
				}
				deleted := i >= tc.min && i <= tc.max
				if deleted && !gone {
					left = append(left, i)
				}
				if !deleted && (gone || !bytes.Equal(l.Data, tc.data(i))) {
					t.Fatalf("entry %d outside the deleted range [%d, %d] is gone or changed (err %v)", i, tc.min, tc.max, err)
				}
			}
			if len(left) > 0 {
				t.Fatalf("DeleteRange(%d, %d) left %d entries of the range, first %v", tc.min, tc.max, len(left), left[:min(5, len(left))])
			}
			first, _ := s.Log.FirstIndex()
			last, _ := s.Log.LastIndex()
			wantFirst, wantLast := uint64(1), n
			if tc.min == 1 {
				wantFirst = tc.max + 1
			} else {
				wantLast = tc.min - 1
			}
			if first != wantFirst || last != wantLast {
				t.Fatalf("first, last index %d, %d after DeleteRange(%d, %d); want %d, %d", first, last, tc.min, tc.max, wantFirst, wantLast)
			}
		})
	}
}
