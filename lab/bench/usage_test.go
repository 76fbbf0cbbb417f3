package bench

import (
	"os"
	"path/filepath"
	"testing"
)

func TestNodeDataDirsSizesEachNodeInNameOrder(t *testing.T) {
	dir := t.TempDir()
	write := func(rel string, n int) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, make([]byte, n), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("node1/shard-0/raft.db", 3000)
	write("node1/shard-0/snapshots/1/state.bin", 500)
	write("node0/raft.db", 100)
	write("report/node9.log", 7) // not a node's data dir
	write("node2.log", 11)       // a file, not a dir

	var names []string
	var sizes []int64
	for name, size := range nodeDataDirs(dir) {
		names = append(names, name)
		sizes = append(sizes, size)
	}
	if len(names) != 2 || names[0] != "node0" || names[1] != "node1" || sizes[0] != 100 || sizes[1] != 3500 {
		t.Fatalf("nodeDataDirs = %v %v, want [node0 node1] [100 3500]", names, sizes)
	}
}
