package status

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"dsspmesh/node/records"
)

// TestEventLogLogsEachEventOnceAtItsLevel: what an operator acts on is in
// the log as it is recorded — joins, leaves, suspicions and new leaders at
// info, a member declared dead and a refused push at warn — each once (a
// leader's second report of one term is not a second line), and kinds
// logged where they are recorded (gossip's refusal of a peer, a kind this
// log does not name) not at all.
func TestEventLogLogsEachEventOnceAtItsLevel(t *testing.T) {
	var buf bytes.Buffer
	now := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	l := NewEventLog(func() time.Time { return now }).LogTo(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}})))
	s3 := uint32(3)
	for _, e := range []records.Event{
		{Kind: records.EventJoin, Node: "b", Detail: "10.0.0.2:7946"},
		{Kind: records.EventSuspect, Node: "c"},
		{Kind: records.EventFailed, Node: "c", Detail: "10.0.0.3:7946"},
		{Kind: records.EventLeave, Node: "d", Detail: "10.0.0.4:7946"},
		{Kind: records.EventLeader, Node: "b", Shard: &s3, Term: 7, Detail: "shard 3: this node leads"},
		{Kind: records.EventLeader, Node: "b", Shard: &s3, Term: 7, Detail: "shard 3: c → b"},
		{Kind: records.EventRejected, Node: "e", Detail: "10.0.0.5:7946"},
		{Kind: "quorum", Detail: "logged by whoever records it"},
	} {
		l.Add(e)
	}
	want := `level=INFO msg="member joined" member=b addr=10.0.0.2:7946
level=INFO msg="member suspected: a probe went unanswered (it may refute it)" member=c
level=WARN msg="member failed: declared dead" member=c addr=10.0.0.3:7946
level=INFO msg="member left" member=d addr=10.0.0.4:7946
level=INFO msg="shard leader" shard=3 leader=b term=7 detail="shard 3: this node leads"
`
	if got := buf.String(); got != want {
		t.Errorf("log:\n%s\nwant:\n%s", got, want)
	}
	if n := len(l.List()); n != 7 {
		t.Errorf("%d events kept, want 7: logging changes nothing of what is recorded", n)
	}
}

// TestEventLogPacesRefusalsPerReason: a storm of refused pushes is one line
// per reason per refusalEvery, the next line counting those held back.
func TestEventLogPacesRefusalsPerReason(t *testing.T) {
	var buf bytes.Buffer
	now := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	l := NewEventLog(func() time.Time { return now }).LogTo(slog.New(slog.NewTextHandler(&buf, nil)))
	refuse := func(reason string) {
		s := uint32(0)
		l.Add(records.Event{Kind: records.EventRejected, Node: "w", Shard: &s, Reason: reason, Detail: "shard 0: push rejected: " + reason})
	}
	for range 50 { // a NaN every 100 ms for 5 s, and one outlier
		refuse("non-finite")
		now = now.Add(100 * time.Millisecond)
	}
	refuse("norm-outlier")
	now = now.Add(5 * time.Second) // 10 s after the first
	refuse("non-finite")
	refuse("non-finite")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3 (non-finite, norm-outlier, non-finite again after 10 s):\n%s", len(lines), buf.String())
	}
	for i, want := range []string{"reason=non-finite", "reason=norm-outlier", `reason=non-finite detail="shard 0: push rejected: non-finite" more="49 since 04:00:00"`} {
		if !strings.Contains(lines[i], "level=WARN msg=\"push refused\" shard=0 worker=w") || !strings.Contains(lines[i], want) {
			t.Errorf("line %d: %s\nwant a refusal with %s", i, lines[i], want)
		}
	}
	if strings.Contains(lines[0], "more=") {
		t.Errorf("the first line counts refusals before it: %s", lines[0])
	}
}
