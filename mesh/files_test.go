package mesh

import (
	"testing"

	"dsspmesh/internal/filegraph"
)

// TestFileArrows: no file of mesh uses a file above it
// (internal/filegraph), but for the arrows listed with their reason.
func TestFileArrows(t *testing.T) {
	filegraph.Check(t, "mesh", ".", map[filegraph.Arrow]string{
		{From: "loopback.go", To: "quic_transport.go"}: "the QUIC transport's streams to its own node: methods of QUICTransport, kept in their own file",
		{From: "silence.go", To: "quic_transport.go"}:  "the QUIC transport's silence per peer (SilenceReporter): methods of QUICTransport, kept in their own file",
	})
}
