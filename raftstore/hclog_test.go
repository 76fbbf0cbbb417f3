package raftstore

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestHCLoggerKeepsLevels(t *testing.T) {
	var buf bytes.Buffer
	l := HCLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})), "raft")
	l.Info("entering follower state")
	l.Named("net").Warn("heartbeat timeout reached", "peer", "n2")
	l.With("shard", 3).Error("failed to append to logs", "error", "disk full")
	l.Trace("noise")
	out := buf.String()
	for _, want := range []string{
		`level=WARN msg="raft.net: heartbeat timeout reached" peer=n2`,
		`level=ERROR msg="raft: failed to append to logs" shard=3 error="disk full"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "follower state") || strings.Contains(out, "noise") {
		t.Errorf("records below warn passed the handler's level:\n%s", out)
	}
}
