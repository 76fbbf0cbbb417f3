package shardapi

import (
	"testing"

	"dsspmesh/internal/filegraph"
)

// TestFileArrows: no file of shardapi uses a file above it
// (internal/filegraph), but for the arrows listed with their reason.
func TestFileArrows(t *testing.T) {
	filegraph.Check(t, "shardapi", ".", map[filegraph.Arrow]string{
		{From: "leaderhint.go", To: "client.go"}: "the leader hint is the Client's own watcher: methods of Client and its settings, kept in their own file",
	})
}
