package status

import (
	"context"
	"dsspmesh/node/records"
	"fmt"
	"slices"
	"testing"
	"time"

	"dsspmesh/mesh"
)

func TestMeshViewFillsShardsNotHostedHereAndMarksTheirAge(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var v View
	// node-b follows shard 1 and is behind; node-c leads it, and shard 2.
	v.set("node-b", PeerView{Shards: []records.ShardStatus{{ID: 1, Leader: "node-x", Term: 2, Local: "follower", Voters: []string{"node-b", "node-c", "node-d"}}}}, t0.Add(-time.Second))
	v.set("node-c", PeerView{
		Shards: []records.ShardStatus{
			{ID: 1, Leader: "node-c", Term: 3, Local: "leader", Voters: []string{"node-b", "node-c", "node-d"}, Pushes: 7},
			{ID: 2, Leader: "node-c", Term: 1, Local: "leader"},
		},
		Workers: []records.WorkerStatus{{ID: "node-a", Clock: 5}, {ID: "node-c", Clock: 6}},
		Worker:  &records.LocalWorker{Iter: 6, ComputeSeconds: 3, WaitSeconds: 1, ItersPerSec: 2},
	}, t0.Add(-3*time.Second))

	s := Status{Node: "node-a", Now: t0,
		Shards: []records.ShardStatus{{ID: 0, Leader: "node-a", Term: 1, Local: "leader"}, {ID: 1}, {ID: 2}, {ID: 3}},
		Worker: &records.LocalWorker{Iter: 5}}
	v.Fill(&s)

	if sh := s.Shards[0]; sh.From != "" || sh.Leader != "node-a" {
		t.Errorf("a local replica must not be overwritten: %+v", sh)
	}
	if sh := s.Shards[1]; sh.Leader != "node-c" || sh.Term != 3 || sh.From != "node-c" || sh.AgeSeconds != 3 || len(sh.Voters) != 3 || sh.Pushes != 7 {
		t.Errorf("shard 1 must come from its leader's answer, 3s old: %+v", sh)
	}
	if sh := s.Shards[3]; sh.Leader != "" || sh.From != "" {
		t.Errorf("no member described shard 3: %+v", sh)
	}
	if len(s.Workers) != 2 || s.WorkersFrom != "node-c" || s.WorkersAgeSeconds != 3 {
		t.Errorf("workers from the leader node-c: %+v from %q age %g", s.Workers, s.WorkersFrom, s.WorkersAgeSeconds)
	}
	if len(s.Trainers) != 2 || s.Trainers[0].ID != "node-a" || s.Trainers[1].ID != "node-c" || s.Trainers[1].WaitShare != 0.25 || s.Trainers[1].AgeSeconds != 3 {
		t.Errorf("trainers: %+v", s.Trainers)
	}

	v.keep([]mesh.NodeID{"node-a", "node-b"})
	s = Status{Node: "node-a", Now: t0, Shards: []records.ShardStatus{{ID: 1}}, Workers: []records.WorkerStatus{{ID: "node-a"}}}
	v.Fill(&s)
	if sh := s.Shards[0]; sh.Leader != "node-x" || sh.From != "node-b" {
		t.Errorf("after node-c is gone, shard 1 from node-b's answer: %+v", sh)
	}
	if s.WorkersFrom != "" || len(s.Workers) != 1 {
		t.Errorf("a node leading a shard keeps its own clock table: %+v from %q", s.Workers, s.WorkersFrom)
	}
}

func TestEventLogKeepsTheLastEventsInOrder(t *testing.T) {
	now := time.Unix(0, 0)
	l := NewEventLog(func() time.Time { now = now.Add(time.Second); return now })
	for i := range eventLogSize + 10 {
		l.Add(records.Event{Kind: records.EventJoin, Node: fmt.Sprint(i)})
	}
	got := l.List()
	if len(got) != eventLogSize || got[0].Node != "10" || got[len(got)-1].Node != fmt.Sprint(eventLogSize+9) {
		t.Fatalf("kept %d events, %s..%s", len(got), got[0].Node, got[len(got)-1].Node)
	}
	for i := 1; i < len(got); i++ {
		if !got[i].At.After(got[i-1].At) {
			t.Fatalf("events out of order at %d", i)
		}
	}
	var nilLog *EventLog
	nilLog.Add(records.Event{})
	if len(nilLog.List()) != 0 {
		t.Fatal("a nil log records nothing")
	}
}

func TestEventLogFollowsMembership(t *testing.T) {
	l := NewEventLog(time.Now)
	ch := make(chan mesh.Event, 8)
	for _, typ := range []mesh.EventType{mesh.EventJoin, mesh.EventUpdate, mesh.EventSuspect, mesh.EventFailed, mesh.EventLeave, mesh.EventRejected} {
		ch <- mesh.Event{Type: typ, Member: mesh.Member{Meta: mesh.Meta{ID: "node-b"}}}
	}
	close(ch)
	l.FollowMembership(context.Background(), ch)
	var kinds []string
	for _, e := range l.List() {
		if e.Node != "node-b" {
			t.Errorf("event names %q", e.Node)
		}
		kinds = append(kinds, e.Kind)
	}
	if fmt.Sprint(kinds) != "[join suspect failed leave rejected]" {
		t.Fatalf("kinds %v (updates are not events)", kinds)
	}
}

func TestLeaderWatchRecordsChangesNotFirstSightings(t *testing.T) {
	l := NewEventLog(time.Now)
	var w leaderWatch
	w.observe(l, []records.ShardStatus{{ID: 0, Leader: "a", Term: 1}, {ID: 1}})
	w.observe(l, []records.ShardStatus{{ID: 0, Leader: "a", Term: 1}, {ID: 1, Leader: "b", Term: 1}})
	if n := len(l.List()); n != 0 {
		t.Fatalf("first sightings recorded: %+v", l.List())
	}
	w.observe(l, []records.ShardStatus{{ID: 0, Leader: "c", Term: 2, From: "c"}, {ID: 1, Leader: "b", Term: 1}})
	w.observe(l, []records.ShardStatus{{ID: 0, Leader: "a", Term: 1}}) // a stale answer
	w.observe(l, []records.ShardStatus{{ID: 0, Leader: "c", Term: 3}}) // re-elected
	got := l.List()
	if len(got) != 2 || got[0].Kind != records.EventLeader || got[0].Node != "c" || *got[0].Shard != 0 || got[0].Term != 2 ||
		got[0].Detail != "shard 0: a → c (seen via c)" || got[1].Term != 3 {
		t.Fatalf("events: %+v", got)
	}
	// This node's replica reports its own leadership first; the sighting
	// of the same term that follows is not a second event.
	zero := uint32(0)
	l.Add(records.Event{Kind: records.EventLeader, Node: "me", Shard: &zero, Term: 4})
	w.observe(l, []records.ShardStatus{{ID: 0, Leader: "me", Term: 4, Local: "leader"}})
	if got := l.List(); len(got) != 3 || got[2].Node != "me" {
		t.Fatalf("events after the replica's own report: %+v", got)
	}
}

func TestMetricsExportOnlyTheClockTableThisNodeHolds(t *testing.T) {
	s := sampleStatus()
	s.WorkersFrom, s.WorkersAgeSeconds = "node-b", 1
	fams, err := NewMetrics(func() Status { return s }).Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "dssp_worker_clock" {
			t.Fatalf("a clock table described by %s is exported here", s.WorkersFrom)
		}
	}
}

func TestViewRoundAsksEveryPeerInTurn(t *testing.T) {
	var others []mesh.Member
	for _, id := range []string{"e", "a", "c", "b", "d"} {
		others = append(others, mesh.Member{Meta: mesh.Meta{ID: mesh.NodeID(id)}})
	}
	if ask, _ := viewRound(others, 3, 8); len(ask) != 5 {
		t.Fatalf("a small mesh asks everyone, got %v", ask)
	}
	seen := map[mesh.NodeID]int{}
	next := 0
	for range 5 { // 5 rounds of 2 over 5 peers: each asked twice
		var ask []mesh.Member
		ask, next = viewRound(others, next, 2)
		if len(ask) != 2 {
			t.Fatalf("asked %v", ask)
		}
		for _, m := range ask {
			seen[m.ID]++
		}
	}
	for _, m := range others {
		if seen[m.ID] != 2 {
			t.Fatalf("asked %v", seen)
		}
	}
}

// TestMeshViewListsMembersHTTP: each member's HTTP address is the one its
// own view answer gave, this node's its own; "" for a member not heard yet.
func TestMeshViewListsMembersHTTP(t *testing.T) {
	var v View
	v.set("node-b", PeerView{HTTP: "10.0.0.2:7948"}, time.Unix(1, 0))
	s := Status{Node: "node-a", HTTP: "10.0.0.1:7948", Now: time.Unix(2, 0),
		Members: []MemberStatus{{ID: "node-a"}, {ID: "node-b"}, {ID: "node-c"}}}
	v.Fill(&s)
	for i, want := range []string{"10.0.0.1:7948", "10.0.0.2:7948", ""} {
		if s.Members[i].HTTP != want {
			t.Errorf("member %s: HTTP %q, want %q", s.Members[i].ID, s.Members[i].HTTP, want)
		}
	}
}

// Leader is the word of a peer that leads the shard itself, the highest
// term heard; a follower's account of its leader is not a leader's word.
func TestMeshViewLeaderIsALeadersOwnWord(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var v View
	v.set("node-b", PeerView{Shards: []records.ShardStatus{{ID: 1, Leader: "node-x", Term: 5, Local: "follower", Voters: []string{"node-b", "node-x"}}}}, t0)
	if _, ok := v.Leader(1); ok {
		t.Fatal("a follower's account taken as the leader's word")
	}
	v.set("node-c", PeerView{Shards: []records.ShardStatus{{ID: 1, Leader: "node-c", Term: 3, Local: "leader", Voters: []string{"node-b", "node-c", "node-d"}}}}, t0)
	v.set("node-d", PeerView{Shards: []records.ShardStatus{{ID: 1, Leader: "node-d", Term: 4, Local: "leader", Voters: []string{"node-b", "node-d", "node-e"}}}}, t0)
	l, ok := v.Leader(1)
	if !ok || l.Leader != "node-d" || l.Term != 4 || !slices.Equal(l.Voters, []string{"node-b", "node-d", "node-e"}) {
		t.Fatalf("leader %+v, %v; want node-d's word at term 4", l, ok)
	}
	if _, ok := v.Leader(2); ok {
		t.Fatal("no peer leads shard 2")
	}
}

// TestViewRTT: the round trip between two members is what either said in
// its view (the lesser of two words), unknown when neither did.
func TestViewRTT(t *testing.T) {
	var v View
	v.set("node-b", PeerView{RTT: map[string]float64{"node-c": 50.5, "node-d": 0.2}}, time.Unix(1, 0))
	v.set("node-c", PeerView{RTT: map[string]float64{"node-b": 51}}, time.Unix(1, 0))
	if d, ok := v.RTT("node-c", "node-b"); !ok || d != 50500*time.Microsecond {
		t.Errorf("RTT(c, b) = %v, %v; want 50.5ms", d, ok)
	}
	if d, ok := v.RTT("node-d", "node-b"); !ok || d != 200*time.Microsecond {
		t.Errorf("RTT(d, b) = %v, %v; want b's word 0.2ms", d, ok)
	}
	if _, ok := v.RTT("node-c", "node-d"); ok {
		t.Error("RTT(c, d): neither said it, yet known")
	}
}
