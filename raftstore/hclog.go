package raftstore

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// HCLogger adapts logger for the hashicorp libraries (raft, raft-boltdb),
// which log through hclog. Each record reaches slog at its own level
// (hclog's Trace as slog.LevelDebug-4), so a node at --log-level warn still
// shows raft's warnings and errors; the message is "<name>: <msg>" with
// hclog's key/value arguments as slog attributes.
func HCLogger(logger *slog.Logger, name string) hclog.Logger {
	l := hclog.NewInterceptLogger(&hclog.LoggerOptions{Name: name, Level: hclog.Off, Output: io.Discard})
	l.RegisterSink(slogSink{logger})
	return l
}

type slogSink struct{ l *slog.Logger }

func (s slogSink) Accept(name string, level hclog.Level, msg string, args ...any) {
	lv := slogLevel(level)
	if level == hclog.Error && msg == "failed to take snapshot" && snapshotLater(args) {
		lv = slog.LevelDebug
	}
	ctx := context.Background()
	if !s.l.Enabled(ctx, lv) {
		return
	}
	if name != "" {
		msg = name + ": " + msg
	}
	s.l.Log(ctx, lv, msg, args...)
}

func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

// snapshotLater reports whether a failed snapshot's error (args' "error")
// only says "not now": raft retries on its own, and a shard catching up
// after a join, or handing leadership over, logged it at error level
// several times a second.
func snapshotLater(args []any) bool {
	for i := 0; i+1 < len(args); i += 2 {
		if k, _ := args[i].(string); k == "error" {
			err, _ := args[i+1].(error)
			return err != nil && (errors.Is(err, raft.ErrLeadershipTransferInProgress) ||
				strings.HasPrefix(err.Error(), "cannot take snapshot now"))
		}
	}
	return false
}
