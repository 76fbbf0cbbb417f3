package node

import (
	"os"
	"testing"

	"dsspmesh/internal/filegraph"
)

// The rooms' file arrows (internal/filegraph): the test lists each room's
// arrows and cycles (go test -run TestRoomFileArrows -v ./node/) and fails
// on a cycle in any of them, node itself included.

// roomDirs are the room packages, relative to node/; every one must keep
// an acyclic file graph.
var roomDirs = []string{".", "worker", "shards", "status", "eval", "records", "job", "join", "datadir", "trainer", "memlimit", "trust"}

func TestRoomFileArrows(t *testing.T) {
	for _, dir := range roomDirs {
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		filegraph.Check(t, "room node/"+dir, dir, nil)
	}
}
