package raftstore

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
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

// TestHCLoggerQuietsSnapshotsNotNow: raft's "failed to take snapshot" for
// a snapshot that must only wait is debug; any other failure stays an error.
func TestHCLoggerQuietsSnapshotsNotNow(t *testing.T) {
	var buf bytes.Buffer
	l := HCLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})), "raft")
	l.Error("failed to take snapshot", "error", raft.ErrLeadershipTransferInProgress)
	l.Error("failed to take snapshot", "error", fmt.Errorf("cannot take snapshot now, wait until the configuration entry at 7 has been applied (have applied 3)"))
	l.Error("failed to take snapshot", "error", errors.New("no space left on device"))
	out := buf.String()
	if strings.Contains(out, "transfer") || strings.Contains(out, "cannot take") {
		t.Errorf("a snapshot that must wait was logged above debug:\n%s", out)
	}
	if !strings.Contains(out, `level=ERROR msg="raft: failed to take snapshot" error="no space left on device"`) {
		t.Errorf("a real snapshot failure is not an error:\n%s", out)
	}
}
