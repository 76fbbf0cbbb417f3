package status

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"dsspmesh/internal/pace"
	"dsspmesh/mesh"
	"dsspmesh/node/records"
)

// eventLogSize bounds the events a node keeps.
const eventLogSize = 256

// EventLog is a bounded ring of events, oldest dropped first; safe for
// concurrent use. now is injected so tests control timestamps.
type EventLog struct {
	mu   sync.Mutex
	now  func() time.Time
	buf  []records.Event
	next int // where the next event goes once buf is full

	// log, if set (LogTo), gets a line for each event Add records; held
	// paces the refused pushes' lines per reason (refusalEvery).
	log  *slog.Logger
	held pace.Pacer[string]
}

func NewEventLog(now func() time.Time) *EventLog {
	return &EventLog{now: now, buf: make([]records.Event, 0, eventLogSize), held: pace.Pacer[string]{Every: refusalEvery}}
}

// Add records e, stamped now unless e.At is set.
func (l *EventLog) Add(e records.Event) {
	if l == nil {
		return
	}
	if logLine := l.record(e); logLine != nil {
		logLine() // outside the lock
	}
}

// record keeps e and returns its log line (LogTo) to write, nil if none.
func (l *EventLog) record(e records.Event) (logLine func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e.Kind == records.EventLeader && l.hasLeader(*e.Shard, e.Term) {
		return nil // the replica's own report and a later sighting of it
	}
	if e.At.IsZero() {
		e.At = l.now()
	}
	logLine = l.line(e)
	if len(l.buf) < cap(l.buf) {
		l.buf = append(l.buf, e)
		return logLine
	}
	l.buf[l.next] = e
	l.next = (l.next + 1) % len(l.buf)
	return logLine
}

// hasLeader reports whether a leader event for shard in term is kept.
func (l *EventLog) hasLeader(shard uint32, term uint64) bool {
	for _, e := range l.buf {
		if e.Kind == records.EventLeader && *e.Shard == shard && e.Term == term {
			return true
		}
	}
	return false
}

// List returns the events oldest first; the caller owns the slice.
func (l *EventLog) List() []records.Event {
	if l == nil {
		return []records.Event{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]records.Event, 0, len(l.buf))
	out = append(out, l.buf[l.next:]...)
	return append(out, l.buf[:l.next]...)
}

// FollowMembership records membership events until events is closed or ctx
// ends. Metadata updates are not events an operator needs.
func (l *EventLog) FollowMembership(ctx context.Context, events <-chan mesh.Event) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				return
			}
			if kind := memberEventKind(ev.Type); kind != "" {
				l.Add(records.Event{Kind: kind, Node: string(ev.Member.ID), Detail: ev.Member.Addr})
			}
		}
	}
}

func memberEventKind(t mesh.EventType) string {
	switch t {
	case mesh.EventJoin:
		return records.EventJoin
	case mesh.EventLeave:
		return records.EventLeave
	case mesh.EventFailed:
		return records.EventFailed
	case mesh.EventSuspect:
		return records.EventSuspect
	case mesh.EventRejected:
		return records.EventRejected
	}
	return ""
}

// leaderWatch turns successive views of every shard's (leader, term) into
// leader events: the shards this node does not host, and a change its own
// replica's report (Deps.OnLeader, recorded at once) already covers is not
// recorded twice. The first sighting of a shard is not an event: at start
// every shard would report one.
type leaderWatch struct {
	seen map[uint32]records.ShardStatus
}

func (w *leaderWatch) observe(l *EventLog, shards []records.ShardStatus) {
	if w.seen == nil {
		w.seen = map[uint32]records.ShardStatus{}
	}
	for _, sh := range shards {
		if sh.Leader == "" {
			continue
		}
		prev, ok := w.seen[sh.ID]
		if ok && prev.Leader == sh.Leader && prev.Term >= sh.Term {
			continue
		}
		if ok && prev.Term > sh.Term {
			continue // an older answer than one already seen
		}
		w.seen[sh.ID] = sh
		if !ok {
			continue
		}
		id := sh.ID
		detail := fmt.Sprintf("shard %d: %s → %s", id, dashIfEmpty(prev.Leader), sh.Leader)
		if sh.From != "" {
			detail += " (seen via " + sh.From + ")"
		}
		l.Add(records.Event{Kind: records.EventLeader, Node: sh.Leader, Shard: &id, Term: sh.Term, Detail: detail})
	}
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// refusalEvery paces the log lines of refused pushes: one line per reason
// per refusalEvery, with the count held back since the reason's last line,
// so that a storm of them (a NaN every iteration) stays readable. /status
// and /metrics count every refusal.
const refusalEvery = 10 * time.Second

// LogTo makes l log each event it records, at the event's level: a
// member's join, leave and suspicion and a shard's new leader at info, a
// member declared dead and a refused push at warn (refusals paced by
// refusalEvery). Kinds it does not name here are logged where they are
// recorded, and so are gossip's refusals of a peer (mesh logs the bad
// metadata); none is logged twice. Call before the first Add.
func (l *EventLog) LogTo(log *slog.Logger) *EventLog {
	l.log = log
	return l
}

// line returns the function that logs e, nil when e is not logged here;
// l.mu is held.
func (l *EventLog) line(e records.Event) func() {
	if l.log == nil {
		return nil
	}
	level, msg := slog.LevelInfo, ""
	args := []any{"member", e.Node} // "node" is this node, on every line
	switch e.Kind {
	case records.EventJoin:
		msg = "member joined"
		args = append(args, "addr", e.Detail)
	case records.EventLeave:
		msg = "member left"
		args = append(args, "addr", e.Detail)
	case records.EventSuspect:
		msg = "member suspected: a probe went unanswered (it may refute it)"
	case records.EventFailed:
		level, msg = slog.LevelWarn, "member failed: declared dead"
		args = append(args, "addr", e.Detail)
	case records.EventLeader:
		msg = "shard leader"
		args = []any{"shard", *e.Shard, "leader", e.Node, "term", e.Term, "detail", e.Detail}
	case records.EventRejected:
		if e.Shard == nil {
			return nil // gossip's: mesh logged why
		}
		level, msg = slog.LevelWarn, "push refused"
		log, held, since := l.held.Note(e.Reason, e.At)
		if !log {
			return nil
		}
		args = []any{"shard", *e.Shard, "worker", e.Node, "reason", e.Reason, "detail", e.Detail}
		if held > 0 {
			args = append(args, "more", fmt.Sprintf("%d since %s", held, since.Format(time.TimeOnly)))
		}
	default:
		return nil
	}
	log := l.log
	return func() { log.Log(context.Background(), level, msg, args...) }
}
