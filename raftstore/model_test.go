package raftstore

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
)

// logModel is the log raft believes it wrote: a contiguous range of
// entries, each identified by its term and a payload derived from both.
type logModel struct {
	first, last uint64
	terms       map[uint64]uint64
}

func entryData(index, term uint64, size int) []byte {
	b := bytes.Repeat([]byte{byte(index), byte(term)}, size/2)
	return append(b, fmt.Sprintf("%d/%d", index, term)...)
}

// TestLogStoreMatchesModelAcrossTruncationsAndRestarts drives the disk stores
// through what raft does to a follower's log over a long faulty life —
// appends, head compactions, a snapshot install that drops everything,
// conflicting-suffix truncations, clean restarts and crash images (the
// folder copied while open, as kill -9 leaves it) — and after every step
// checks FirstIndex, LastIndex and every entry in between against a model.
func TestLogStoreMatchesModelAcrossTruncationsAndRestarts(t *testing.T) {
	seeds := 6
	if testing.Short() {
		seeds = 2
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { logModelRun(t, seed, 160) })
	}
}

func logModelRun(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 31))
	cfg := DefaultConfig()
	root := t.TempDir()
	dir := filepath.Join(root, "0")
	open := func() *Stores {
		t.Helper()
		s, err := Open(dir, 1, cfg, testLogger(t))
		if err != nil {
			t.Fatalf("open %s: %v", dir, err)
		}
		return s
	}
	s := open()
	defer func() { s.Close() }()
	m := logModel{terms: map[uint64]uint64{}}
	term := uint64(1)
	var history []string

	appendN := func(from uint64, n int) {
		logs := make([]*raft.Log, n)
		for i := range logs {
			idx := from + uint64(i)
			logs[i] = &raft.Log{Index: idx, Term: term, Type: raft.LogCommand, Data: entryData(idx, term, 16<<10+rng.IntN(48<<10))}
			m.terms[idx] = term
		}
		if err := s.Log.StoreLogs(logs); err != nil {
			t.Fatalf("%v\nStoreLogs(%d..%d): %v", history, from, from+uint64(n)-1, err)
		}
		if m.last == 0 {
			m.first = from
		}
		m.last = from + uint64(n) - 1
	}
	deleteRange := func(lo, hi uint64) {
		if err := s.Log.DeleteRange(lo, hi); err != nil {
			t.Fatalf("%v\nDeleteRange(%d, %d): %v", history, lo, hi, err)
		}
		for i := lo; i <= hi; i++ {
			delete(m.terms, i)
		}
		switch {
		case lo <= m.first && hi >= m.last:
			m.first, m.last = 0, 0
		case lo <= m.first:
			m.first = hi + 1
		default:
			m.last = lo - 1
		}
	}

	for step := range steps {
		var op string
		switch p := rng.IntN(100); {
		case p < 45 || m.last == 0:
			from := m.last + 1
			if m.last == 0 && rng.IntN(2) == 0 {
				from += uint64(rng.IntN(200)) // after a snapshot install
			}
			n := 1 + rng.IntN(24)
			op = fmt.Sprintf("append %d+%d", from, n)
			appendN(from, n)
		case p < 60: // compaction after a snapshot
			hi := m.first + uint64(rng.IntN(int(m.last-m.first+1)))
			if hi == m.last {
				hi-- // compaction keeps trailing logs
			}
			if hi < m.first {
				continue
			}
			op = fmt.Sprintf("compact %d..%d", m.first, hi)
			deleteRange(m.first, hi)
		case p < 64: // snapshot install with a monotonic store: drop all
			op = fmt.Sprintf("drop all %d..%d", m.first, m.last)
			deleteRange(m.first, m.last)
		case p < 80: // a new leader overwrites a conflicting suffix
			if m.last == m.first {
				continue
			}
			lo := m.first + 1 + uint64(rng.IntN(int(m.last-m.first)))
			op = fmt.Sprintf("truncate tail %d..%d", lo, m.last)
			deleteRange(lo, m.last)
			term++
			appendN(lo, 1+rng.IntN(12))
		case p < 90:
			op = "restart"
			if err := s.Close(); err != nil {
				t.Fatalf("%v\nclose: %v", history, err)
			}
			s = open()
		default:
			// A crash image: the folder as it is on disk now, open.
			next := filepath.Join(root, fmt.Sprint(step+1))
			if err := os.CopyFS(next, os.DirFS(dir)); err != nil {
				t.Fatal(err)
			}
			op = "crash"
			s.Close()
			dir = next
			s = open()
		}
		history = append(history, op)
		checkAgainstModel(t, s, m, history)
	}
}

func checkAgainstModel(t *testing.T, s *Stores, m logModel, history []string) {
	t.Helper()
	first, err1 := s.Log.FirstIndex()
	last, err2 := s.Log.LastIndex()
	if err1 != nil || err2 != nil || first != m.first || last != m.last {
		t.Fatalf("after %v:\nrange [%d, %d] (%v, %v), want [%d, %d]", history, first, last, err1, err2, m.first, m.last)
	}
	for i := m.first; i != 0 && i <= m.last; i++ {
		var l raft.Log
		if err := s.Log.GetLog(i, &l); err != nil {
			t.Fatalf("after %v:\nGetLog(%d) in [%d, %d]: %v", history, i, m.first, m.last, err)
		}
		want := m.terms[i]
		if l.Index != i || l.Term != want || !bytes.HasSuffix(l.Data, fmt.Appendf(nil, "%d/%d", i, want)) {
			t.Fatalf("after %v:\nGetLog(%d) = index %d term %d, want term %d", history, i, l.Index, l.Term, want)
		}
	}
}
