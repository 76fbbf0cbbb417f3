package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// nodeBinary is this executable, which the benchmarks start as their
// 'dssp node' processes.
func nodeBinary() (string, error) {
	bin, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("bench: cannot find this binary to start nodes: %w", err)
	}
	return bin, nil
}

// benchContext returns a benchmark command's context, cancelled on SIGTERM
// or SIGINT (stop releases the signals), and its logger, writing records at
// level and above to the command's stderr.
func benchContext(cmd *cobra.Command, level slog.Level) (ctx context.Context, log *slog.Logger, stop context.CancelFunc) {
	log = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
	ctx, stop = signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
	return ctx, log, stop
}
