package shard

import (
	"testing"

	"dsspmesh/internal/filegraph"
)

// TestFileArrows: no file of shard uses a file above it
// (internal/filegraph; go test -run TestFileArrows -v ./shard lists them).
func TestFileArrows(t *testing.T) { filegraph.Check(t, "shard", ".", nil) }
