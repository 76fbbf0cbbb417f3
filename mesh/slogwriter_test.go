package mesh

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestSlogWriterLevels: memberlist's lines reach slog at their own level,
// except those the node logs as events (a suspicion, a member marked
// failed) and two errors that are no fault (a send on this node's closed
// socket, a peer refusing a connection), which go to debug; a suspicion
// still becomes an event.
func TestSlogWriterLevels(t *testing.T) {
	var buf bytes.Buffer
	var suspected []string
	w := &slogWriter{log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug - 4})),
		suspect: func(name string) { suspected = append(suspected, name) }}
	for _, c := range []struct{ line, want string }{
		{"[INFO] memberlist: Suspect n2 has failed, no acks received", "DEBUG"},
		{"[INFO] memberlist: Marking n2 as failed, suspect timeout reached (1 peer confirmations)", "DEBUG"},
		{"[ERR] memberlist: Failed to send gossip to 127.0.0.1:7001: write udp 127.0.0.1:7000->127.0.0.1:7001: use of closed network connection", "DEBUG"},
		{"[ERR] memberlist: Push/Pull with n2 failed: dial tcp 127.0.0.1:7001: connect: connection refused", "DEBUG"},
		{"[ERR] memberlist: Failed to send ack: write udp 127.0.0.1:7000->127.0.0.1:7001: use of closed network connection from=127.0.0.1:7001", "DEBUG"},
		{"[ERR] memberlist: Push/Pull with n2 failed: dial tcp 127.0.0.1:7001: i/o timeout", "ERROR"},
		{"[ERR] memberlist: failed to receive: encryption is configured but remote state is not encrypted from=127.0.0.1:5000", "ERROR"},
		{"[WARN] memberlist: Refuting a suspect message (from: n2)", "WARN"},
		{"[INFO] memberlist: Updating address for left or failed node n2 from 127.0.0.1:1 to 127.0.0.1:2", "INFO"},
	} {
		buf.Reset()
		w.Write([]byte(c.line + "\n"))
		if got := buf.String(); !strings.Contains(got, "level="+c.want+" ") {
			t.Errorf("%s\nlogged as %s, want level %s", c.line, got, c.want)
		}
	}
	if len(suspected) != 1 || suspected[0] != "n2" {
		t.Errorf("suspected %v, want [n2]", suspected)
	}
}
