package raftstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"dsspmesh/mesh"
)

// HCLogger adapts logger for the hashicorp libraries (raft, raft-boltdb),
// which log through hclog. Each record reaches slog at its own level
// (hclog's Trace as slog.LevelDebug-4), so a node at --log-level warn still
// shows raft's warnings and errors, except the records [RecordLevel] moves:
// raft's routine snapshot and catch-up chatter goes to debug, and errors
// raft logs on healthy paths (a follower behind, a peer that left) go to
// debug or warn. The message is "<name>: <msg>" with hclog's key/value
// arguments as slog attributes (hclog.Fmt values formatted).
func HCLogger(logger *slog.Logger, name string) hclog.Logger {
	l := hclog.NewInterceptLogger(&hclog.LoggerOptions{Name: name, Level: hclog.Off, Output: io.Discard})
	l.RegisterSink(slogSink{logger})
	return l
}

type slogSink struct{ l *slog.Logger }

func (s slogSink) Accept(name string, level hclog.Level, msg string, args ...any) {
	lv := RecordLevel(level, msg, args)
	ctx := context.Background()
	if !s.l.Enabled(ctx, lv) {
		return
	}
	if name != "" {
		msg = name + ": " + msg
	}
	s.l.Log(ctx, lv, msg, formatArgs(args)...)
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

// routine are raft's (and its file snapshot store's) info records that
// come with every snapshot, compaction, catch-up or election: a shard
// under load snapshots every few seconds, and these were 90% of a node's
// log.
var routine = map[string]bool{
	"starting snapshot up to":                                true,
	"snapshot complete up to":                                true,
	"compacting logs":                                        true,
	"creating new snapshot":                                  true,
	"reaping snapshot":                                       true,
	"snapshot restore progress":                              true,
	"snapshot network transfer progress":                     true,
	"copied to local snapshot":                               true,
	"pre-vote campaign failed, waiting for election timeout": true,
	// An election's steps: its outcome is a follower's "entering follower
	// state", which stays info, or "entering leader state" (below).
	"pre-vote successful, starting election": true,
	"entering candidate state":               true,
	"election won":                           true,
	// A replica's configuration at start, and a leader starting to
	// replicate to each peer; changes are "updating configuration".
	"initial configuration":            true,
	"added peer, starting replication": true,
	// A replica of this node becoming leader: the node's event log logs
	// the shard's new leader (node/status.EventLog.LogTo).
	"entering leader state": true,
}

// contactWarnAfter is how long a leader may miss a peer's answers before
// raft's "failed to contact" warning stays a warning: twice our shards'
// lease (shard.DefaultConfig's LeaderLeaseTimeout, 250 ms), the heartbeat
// timeout that lets a follower call an election.
const contactWarnAfter = 500 * time.Millisecond

// toPeer are raft's errors for one failed RPC to a peer; raft retries
// each with a backoff, and "failed to contact" (a warning) names a peer
// that stays silent.
var toPeer = map[string]bool{
	"failed to heartbeat to":         true,
	"failed to appendEntries to":     true,
	"failed to make requestVote RPC": true,
	"failed to send snapshot to":     true,
	"failed to install snapshot":     true, // the send's cause, logged before "failed to send snapshot to"
}

// incoming are raft's errors for one RPC a peer sent this node: reading
// the command, or flushing the answer to its stream. Both fail when either
// side's transport closes under a running RPC (a graceful stop).
var incoming = map[string]bool{
	"failed to decode incoming command": true,
	"failed to flush response":          true,
}

// ErrOlderSnapshot is a replica's refusal (its state machine's Restore) of
// a snapshot that ends before the index it has applied: raft's
// installSnapshot would move its applied index back below entries its own
// snapshots compacted away (docs/reliability.md bug 30). The refusal
// crosses the raft RPC as text, so RecordLevel matches its message.
var ErrOlderSnapshot = errors.New("a snapshot older than the applied state")

// snapshotRefusal are raft's error records that carry a follower's refusal
// of a snapshot.
var snapshotRefusal = map[string]bool{
	"failed to restore snapshot": true,
	"failed to install snapshot": true,
	"failed to send snapshot to": true,
}

// RecordLevel is the slog level of one hclog record. It is hclog's level
// (slogLevel) except for these records, matched by message and condition:
//   - routine snapshot, compaction, transfer-progress, election-step and
//     replica-start info (the map routine): debug.
//   - "no known peers, aborting election" (a replica not yet in any
//     configuration: the leader adds it) and "appendEntries rejected,
//     sending older logs" (a follower behind): debug.
//   - "failed to get log" and "failed to get previous log" for
//     raft.ErrLogNotFound (the entry was compacted or not received yet;
//     raft sends older entries or a snapshot instead): debug.
//   - "heartbeat timeout reached, starting election" with no last leader
//     (a new replica's first election): info.
//   - "failed to take snapshot" that must only wait (snapshotLater): debug.
//   - "failed to decode incoming command" or "failed to flush response"
//     (the map incoming: reading a peer's RPC or writing its answer) for
//     a stream or connection closed in order (mesh.Orderly: the peer or
//     this node shut down), for
//     this node's raft transport shutting down (raft.ErrTransportShutdown:
//     a graceful stop), or for a peer's connection reset by its restart
//     (mesh.PeerRestarted): debug; for a connection that went silent
//     (mesh.Unreachable: the peer was killed or cut off, and the member's
//     failure is logged as an event): warn.
//   - a snapshot a follower refused as older than its applied state
//     (ErrOlderSnapshot), on the follower ("failed to restore snapshot")
//     and on the leader ("failed to install snapshot", "failed to send
//     snapshot to"): warn — the leader sends a newer one or the entries.
//   - "peer has newer term, stopping replication" (this leader learned of
//     a later term and steps down; the node logs the new leader as an
//     event): info.
//   - "failed to contact" a peer for less than contactWarnAfter (raft
//     warns from its lease, 250 ms in our shards, to three leases; a busy
//     host's pause trips it, a dead peer's silence grows past
//     contactWarnAfter within the same checks): debug.
//   - an RPC to a peer (toPeer) that failed because the peer left in
//     order (mesh.Orderly, or the stream's EOF: the peer closed it) or
//     membership no longer lists it, or because it restarted
//     (mesh.PeerRestarted: a killed node back) and its replica is not
//     listening yet (mesh.NoListener): debug — raft retries, "failed to
//     contact" warns of a peer that stays away, and the member's failure
//     and join are logged as events; because its connection or a dial's
//     handshake timed out (mesh.Unreachable: killed, partitioned, or
//     stopped while membership still listed it): warn.
func RecordLevel(level hclog.Level, msg string, args []any) slog.Level {
	lv := slogLevel(level)
	switch {
	case level <= hclog.Info && routine[msg]:
		return slog.LevelDebug
	case level == hclog.Warn && (msg == "no known peers, aborting election" || msg == "appendEntries rejected, sending older logs"):
		return slog.LevelDebug
	case (msg == "failed to get log" || msg == "failed to get previous log") && errors.Is(argErr(args), raft.ErrLogNotFound):
		return slog.LevelDebug
	case level == hclog.Warn && msg == "heartbeat timeout reached, starting election" && argString(args, "last-leader-id") == "":
		return slog.LevelInfo
	case level == hclog.Error && msg == "failed to take snapshot" && snapshotLater(argErr(args)):
		return slog.LevelDebug
	case level == hclog.Error && incoming[msg] && incomingEnded(argErr(args)):
		return slog.LevelDebug
	case level == hclog.Error && incoming[msg] && mesh.Unreachable(cause(argErr(args))):
		return slog.LevelWarn
	case level == hclog.Error && snapshotRefusal[msg] && strings.Contains(fmt.Sprint(argErr(args)), ErrOlderSnapshot.Error()):
		return slog.LevelWarn
	case level == hclog.Error && msg == "peer has newer term, stopping replication":
		return slog.LevelInfo
	case level == hclog.Warn && msg == "failed to contact" && argDuration(args, "time") < contactWarnAfter:
		return slog.LevelDebug
	case level == hclog.Error && toPeer[msg]:
		switch err := cause(argErr(args)); {
		case mesh.Orderly(err) || errors.Is(err, mesh.ErrNoRoute) || mesh.PeerRestarted(err) || mesh.NoListener(err) ||
			errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			return slog.LevelDebug
		case mesh.Unreachable(err):
			return slog.LevelWarn
		}
	}
	return lv
}

// arg returns the value of key in hclog's key/value args.
func arg(args []any, key string) (any, bool) {
	for i := 0; i+1 < len(args); i += 2 {
		if k, _ := args[i].(string); k == key {
			return args[i+1], true
		}
	}
	return nil, false
}

// argErr is args' "error" value as an error (raft passes both errors and
// strings there), nil if none.
func argErr(args []any) error {
	v, _ := arg(args, "error")
	switch e := v.(type) {
	case error:
		return e
	case string:
		return errors.New(e)
	}
	return nil
}

// argDuration is args' key as a duration (raft logs time.Duration
// values), 0 if it is none.
func argDuration(args []any, key string) time.Duration {
	v, _ := arg(args, key)
	d, _ := v.(time.Duration)
	return d
}

func argString(args []any, key string) string {
	v, ok := arg(args, key)
	if !ok || v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

// cause follows err's Cause chain: the msgpack codec wraps a read's error
// in a type with Cause but no Unwrap, so errors.Is cannot see through it.
func cause(err error) error {
	for range 8 {
		c, ok := err.(interface{ Cause() error })
		if !ok || c.Cause() == nil || c.Cause() == err {
			return err
		}
		err = c.Cause()
	}
	return err
}

// formatArgs renders hclog's formatting values (hclog.Fmt, Hex, Octal,
// Binary, Quote), which slog would print as raw slices and numbers
// ("[%+v [...]]"); other values pass unchanged. args is not modified.
func formatArgs(args []any) []any {
	var out []any
	for i, v := range args {
		var s string
		switch f := v.(type) {
		case hclog.Format:
			if len(f) == 0 {
				continue
			}
			format, _ := f[0].(string)
			s = fmt.Sprintf(format, f[1:]...)
		case hclog.Hex:
			s = fmt.Sprintf("0x%x", int(f))
		case hclog.Octal:
			s = fmt.Sprintf("0%o", int(f))
		case hclog.Binary:
			s = fmt.Sprintf("0b%b", int(f))
		case hclog.Quote:
			s = fmt.Sprintf("%q", string(f))
		default:
			continue
		}
		if out == nil {
			out = append([]any(nil), args...)
		}
		out[i] = s
	}
	if out == nil {
		return args
	}
	return out
}

// incomingEnded reports whether a peer's raft stream ended for a reason
// that is no fault (see RecordLevel).
func incomingEnded(err error) bool {
	c := cause(err)
	return mesh.Orderly(c) || mesh.PeerRestarted(c) || errors.Is(err, raft.ErrTransportShutdown)
}

// snapshotLater reports whether a failed snapshot's error only says "not
// now": raft retries on its own, and a shard catching up after a join,
// handing leadership over, or holding log entries it cannot commit yet
// (nothing new applied since the last snapshot: its peers stopped first)
// logged it at error level several times a second.
func snapshotLater(err error) bool {
	return err != nil && (errors.Is(err, raft.ErrLeadershipTransferInProgress) ||
		errors.Is(err, raft.ErrNothingNewToSnapshot) ||
		strings.HasPrefix(err.Error(), "cannot take snapshot now"))
}
