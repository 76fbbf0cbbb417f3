package status

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"dsspmesh/node/records"
)

// refusalEvery paces the log lines of refused pushes: one line per reason
// per refusalEvery, with the count held back since the reason's last line,
// so that a storm of them (a NaN every iteration) stays readable. /status
// and /metrics count every refusal.
const refusalEvery = 10 * time.Second

// heldRefusals is one reason's refusals since its last line.
type heldRefusals struct {
	last time.Time // when its last line was logged
	n    int       // refusals since, not logged
}

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
		key := e.Reason
		h := l.held[key]
		if h == nil {
			if l.held == nil {
				l.held = map[string]*heldRefusals{}
			}
			h = &heldRefusals{}
			l.held[key] = h
		} else if e.At.Sub(h.last) < refusalEvery {
			h.n++
			return nil
		}
		args = []any{"shard", *e.Shard, "worker", e.Node, "reason", e.Reason, "detail", e.Detail}
		if h.n > 0 {
			args = append(args, "more", fmt.Sprintf("%d since %s", h.n, h.last.Format(time.TimeOnly)))
		}
		h.last, h.n = e.At, 0
	default:
		return nil
	}
	log := l.log
	return func() { log.Log(context.Background(), level, msg, args...) }
}
