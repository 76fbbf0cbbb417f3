package raftstore

import (
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// HCLogger adapts logger for the hashicorp libraries (raft, raft-wal), which
// log through hclog. hclog formats each line itself ("[WARN]  raft: ...");
// the line reaches slog at Info with hclog's level inside its text, and
// anything below Info from those libraries is dropped.
func HCLogger(logger *slog.Logger, name string) hclog.Logger {
	std := slog.NewLogLogger(logger.Handler(), slog.LevelInfo)
	return hclog.FromStandardLogger(std, &hclog.LoggerOptions{
		Name:            name,
		Level:           hclog.Info,
		DisableTime:     true,
		IncludeLocation: false,
	})
}
