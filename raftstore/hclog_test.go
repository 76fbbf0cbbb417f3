package raftstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
	"github.com/quic-go/quic-go"

	"dsspmesh/mesh"
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

// streamReader fails every read with err, as a QUIC stream does once the
// peer canceled it.
type streamReader struct{ err error }

func (r streamReader) Read([]byte) (int, error) { return 0, r.err }

// TestRecordLevel: raft's routine records go to debug and its errors on
// healthy paths to debug or warn, each matched by message and condition;
// the same messages with another condition keep raft's level.
func TestRecordLevel(t *testing.T) {
	// raft-net reads commands with the msgpack codec, whose error hides
	// the stream's behind Cause: decode from a canceled stream for real.
	var v any
	canceled := codec.NewDecoder(streamReader{&quic.StreamError{StreamID: 5, Remote: true}}, &codec.MsgpackHandle{}).Decode(&v)
	if canceled == nil || !strings.Contains(canceled.Error(), "stream 5 canceled") {
		t.Fatalf("decoding from a canceled stream: %v", canceled)
	}
	garbage := codec.NewDecoder(bytes.NewReader([]byte{0xc1}), &codec.MsgpackHandle{}).Decode(&v)
	if garbage == nil {
		t.Fatal("decoding a byte msgpack never uses succeeded")
	}
	closed := &quic.ApplicationError{Remote: true, ErrorMessage: "transport closed"}
	gone := fmt.Errorf("mesh: node %q is not a live member: %w", "n2", mesh.ErrNoRoute)
	timedOut := fmt.Errorf("mesh: connect to n2: %w", &quic.IdleTimeoutError{})
	refused := fmt.Errorf("mesh: connect to n2: %w", errors.New("tls: bad certificate"))
	notFound := raft.ErrLogNotFound
	restarted := &quic.StatelessResetError{}
	noListener := &quic.StreamError{StreamID: 8, ErrorCode: 2, Remote: true} // mesh's codeNoListener
	// A command read from a killed peer's connection until it idled out.
	silent := codec.NewDecoder(streamReader{&quic.IdleTimeoutError{}}, &codec.MsgpackHandle{}).Decode(&v)
	// A heartbeat's reply read from a stream the restarted peer refused.
	refusedRead := codec.NewDecoder(streamReader{noListener}, &codec.MsgpackHandle{}).Decode(&v)

	D, I, W, E := slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError
	for _, c := range []struct {
		level hclog.Level
		msg   string
		args  []any
		want  slog.Level
	}{
		{hclog.Info, "starting snapshot up to", []any{"index", 13}, D},
		{hclog.Info, "snapshot complete up to", []any{"index", 13}, D},
		{hclog.Info, "compacting logs", []any{"from", 1, "to", 9}, D},
		{hclog.Info, "creating new snapshot", []any{"path", "/x"}, D},
		{hclog.Info, "reaping snapshot", []any{"path", "/x"}, D},
		{hclog.Info, "snapshot network transfer progress", nil, D},
		{hclog.Info, "copied to local snapshot", []any{"bytes", 10}, D},
		{hclog.Info, "pre-vote campaign failed, waiting for election timeout", nil, D},
		{hclog.Info, "entering candidate state", []any{"term", 2}, D},
		{hclog.Info, "election won", []any{"term", 2, "tally", 1}, D},
		{hclog.Info, "initial configuration", []any{"index", 0}, D},
		{hclog.Info, "added peer, starting replication", []any{"peer", "n2"}, D},
		{hclog.Warn, "no known peers, aborting election", nil, D},
		{hclog.Warn, "appendEntries rejected, sending older logs", []any{"next", 1}, D},
		{hclog.Error, "failed to get log", []any{"index", 1, "error", notFound}, D},
		{hclog.Warn, "failed to get previous log", []any{"previous-index", 38, "last-index", 0, "error", notFound}, D},
		{hclog.Warn, "heartbeat timeout reached, starting election", []any{"last-leader-addr", "", "last-leader-id", ""}, I},
		{hclog.Error, "failed to decode incoming command", []any{"error", canceled}, D},
		{hclog.Error, "failed to decode incoming command", []any{"error", closed}, D},
		{hclog.Error, "failed to heartbeat to", []any{"peer", "n2", "backoff time", 10, "error", closed}, D},
		{hclog.Error, "failed to appendEntries to", []any{"peer", "n2", "error", gone}, D},
		{hclog.Error, "failed to make requestVote RPC", []any{"target", "n2", "error", gone, "term", 4}, D},
		{hclog.Error, "failed to heartbeat to", []any{"peer", "n2", "error", timedOut}, W},
		// A dial whose deadline passed in the handshake (the peer stopped
		// while membership still listed it): a warning, not an error.
		{hclog.Error, "failed to heartbeat to", []any{"peer", "n2", "error", fmt.Errorf("mesh: connect to n2 at a: %w", fmt.Errorf("%w: %w", mesh.ErrDialTimeout, context.DeadlineExceeded))}, W},
		{hclog.Error, "failed to appendEntries to", []any{"peer", "n2", "error", restarted}, D},
		{hclog.Error, "failed to heartbeat to", []any{"peer", "n2", "error", refusedRead}, D},
		{hclog.Error, "failed to install snapshot", []any{"id", "2-14-1", "error", noListener}, D},
		{hclog.Error, "failed to send snapshot to", []any{"peer", "n2", "error", noListener}, D},
		{hclog.Info, "entering leader state", nil, D}, // the node's event log logs it
		{hclog.Error, "failed to decode incoming command", []any{"error", raft.ErrTransportShutdown}, D},
		{hclog.Error, "failed to decode incoming command", []any{"error", restarted}, D},
		// This node's transport closed under an RPC's answer (a graceful
		// stop): what the leaver logged in CI's healthy-mesh test.
		{hclog.Error, "failed to flush response", []any{"error", &quic.ApplicationError{ErrorMessage: "transport closed"}}, D},
		{hclog.Error, "failed to flush response", []any{"error", timedOut}, W},
		{hclog.Error, "failed to flush response", []any{"error", refused}, E},
		{hclog.Error, "failed to appendEntries to", []any{"peer", "n2", "error", io.EOF}, D},
		{hclog.Error, "failed to heartbeat to", []any{"peer", "n2", "error", codec.NewDecoder(bytes.NewReader([]byte{0x92}), &codec.MsgpackHandle{}).Decode(&v)}, D},
		{hclog.Warn, "failed to contact", []any{"server-id", "n2", "time", 295 * time.Millisecond}, D},
		{hclog.Error, "failed to decode incoming command", []any{"error", silent}, W},
		{hclog.Error, "peer has newer term, stopping replication", []any{"peer", "n2"}, I},
		{hclog.Error, "failed to restore snapshot", []any{"error", fmt.Errorf("failed to restore snapshot 2-8-1: shard 0: %w: its state ends at index 8, this replica applied up to 30", ErrOlderSnapshot)}, W},
		{hclog.Error, "failed to install snapshot", []any{"id", "2-8-1", "error", errors.New("failed to restore snapshot 2-8-1: shard 0: " + ErrOlderSnapshot.Error() + ": its state ends at index 8")}, W},
		{hclog.Warn, "failed to contact", []any{"server-id", "n2", "time", 715 * time.Millisecond}, W},

		// What an operator acts on keeps its level.
		{hclog.Info, "entering follower state", nil, I},
		{hclog.Info, "updating configuration", nil, I},
		{hclog.Info, "Installed remote snapshot", nil, I},
		{hclog.Warn, "heartbeat timeout reached, starting election", []any{"last-leader-addr", "n1", "last-leader-id", "n1"}, W},
		{hclog.Warn, "failed to contact quorum of nodes, stepping down", nil, W},
		{hclog.Error, "failed to get log", []any{"index", 1, "error", errors.New("bolt: corrupt page")}, E},
		{hclog.Warn, "failed to get previous log", []any{"error", errors.New("checksum mismatch")}, W},
		{hclog.Error, "failed to decode incoming command", []any{"error", garbage}, E},
		{hclog.Error, "failed to heartbeat to", []any{"peer", "n2", "error", refused}, E},
		{hclog.Error, "failed to appendEntries to", []any{"peer", "n2"}, E},
		{hclog.Error, "failed to install snapshot", []any{"error", &quic.StreamError{ErrorCode: 1, Remote: true}}, E},
		{hclog.Error, "failed to append to logs", []any{"error", closed}, E},
		{hclog.Error, "failed to take snapshot", []any{"error", errors.New("no space left on device")}, E},
		{hclog.Error, "failed to take snapshot", []any{"error", raft.ErrNothingNewToSnapshot}, D},
	} {
		if got := RecordLevel(c.level, c.msg, c.args); got != c.want {
			t.Errorf("%s %q %v: level %v, want %v", c.level, c.msg, c.args, got, c.want)
		}
	}
}

// TestHCLoggerFormatsFmtValues: raft logs its configurations with
// hclog.Fmt; the bridge formats them instead of printing "[%+v [...]]".
func TestHCLoggerFormatsFmtValues(t *testing.T) {
	var buf bytes.Buffer
	l := HCLogger(slog.New(slog.NewTextHandler(&buf, nil)), "raft")
	servers := []raft.Server{{Suffrage: raft.Voter, ID: "n1", Address: "n1"}}
	l.Info("updating configuration", "command", "AddVoter", "servers", hclog.Fmt("%+v", servers), "flags", hclog.Hex(255))
	out := buf.String()
	if want := `servers="[{Suffrage:Voter ID:n1 Address:n1}]" flags=0xff`; !strings.Contains(out, want) {
		t.Errorf("output lacks %s:\n%s", want, out)
	}
	if strings.Contains(out, "%+v") {
		t.Errorf("a format verb reached the log:\n%s", out)
	}
}
