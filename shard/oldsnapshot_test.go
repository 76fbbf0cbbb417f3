package shard

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"dsspmesh/shardapi"
)

// TestSnapshotsOfEarlierBuildsRestore restores the snapshots in
// testdata/snapshots, written by the build of 67c98ee (a momentum job with
// a summed group, a duplicate and a refusal; shard 0 under the balance
// layer, pipelined, with a pin, a revocation and a removal; the outer
// Nesterov in the middle of a momentum period; a shard not initialised
// that holds a revocation). Each must restore to the state hash that build
// computed, and the entry that build applied next (its log bytes kept
// beside it) must give the same outcome and the same hash.
func TestSnapshotsOfEarlierBuildsRestore(t *testing.T) {
	dir := filepath.Join("testdata", "snapshots")
	m, err := os.Open(filepath.Join(dir, "manifest.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	sc := bufio.NewScanner(m)
	n := 0
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		name, kv := f[0], map[string]string{}
		for _, x := range f[1:] {
			k, v, _ := strings.Cut(x, "=")
			kv[k] = v
		}
		t.Run(name, func(t *testing.T) {
			snap, err := os.ReadFile(filepath.Join(dir, name+".snap"))
			if err != nil {
				t.Fatal(err)
			}
			next, err := os.ReadFile(filepath.Join(dir, name+".next"))
			if err != nil {
				t.Fatal(err)
			}
			index, _ := strconv.ParseUint(kv["index"], 10, 64)
			g := NewFSM(1, nil)
			if err := g.Restore(nopCloser{bytes.NewReader(snap)}); err != nil {
				t.Fatal(err)
			}
			if h := g.StateHash(); hex.EncodeToString(h[:]) != kv["restore"] || g.AppliedIndex() != index {
				t.Fatalf("restored: hash %x index %d, want %s at %d", h, g.AppliedIndex(), kv["restore"], index)
			}
			if b := snapshotBytes(t, g); !bytes.Equal(b, snap) {
				t.Fatal("the restored state's snapshot differs from the one restored")
			}
			a := g.Apply(&raft.Log{Index: index + 1, Type: raft.LogCommand, Data: next}).(shardapi.Applied)
			if got := appliedSummary(a); got != kv["applied"] {
				t.Fatalf("next entry: %s, want %s", got, kv["applied"])
			}
			if h := g.StateHash(); hex.EncodeToString(h[:]) != kv["next"] {
				t.Fatalf("after the next entry: hash %x, want %s", h, kv["next"])
			}
		})
		n++
	}
	if n < 4 {
		t.Fatalf("%d snapshots in the manifest", n)
	}
}

// appliedSummary is the manifest's form of an entry's outcome.
func appliedSummary(a shardapi.Applied) string {
	s := a.Kind
	for _, p := range a.Pushes {
		s += fmt.Sprintf(",%s/%d:applied=%v", p.Worker, p.Iter, p.Applied)
	}
	if a.Err != nil {
		s += ",err"
	}
	return s
}
