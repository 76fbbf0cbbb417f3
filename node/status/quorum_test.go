package status

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"dsspmesh/mesh"
	"dsspmesh/node/job"
	"dsspmesh/node/records"
)

func TestJudgeQuorum(t *testing.T) {
	t0 := time.Unix(1000, 0)
	abc := []string{"a", "b", "c"}
	only := func(ids ...string) func(string) bool {
		return func(id string) bool { return slices.Contains(ids, id) }
	}
	for _, tc := range []struct {
		name       string
		voters     []string
		leader     string
		leaderless time.Duration
		reachable  func(string) bool
		want       string
		waiting    []string
	}{
		{"a leader", abc, "b", 0, only("a"), records.QuorumOK, nil},
		{"no leader within the grace", abc, "", QuorumGrace - time.Millisecond, only("a"), records.QuorumElecting, nil},
		{"two of three down", abc, "", QuorumGrace, only("a"), records.QuorumLost, []string{"b", "c"}},
		{"one of three down", abc, "", time.Minute, only("a", "c"), records.QuorumElecting, nil},
		{"one of two down", []string{"b", "a"}, "", QuorumGrace, only("a"), records.QuorumLost, []string{"b"}},
		{"two of five down", []string{"e", "d", "c", "b", "a"}, "", time.Minute, only("a", "b", "c"), records.QuorumElecting, nil},
		{"three of five down", []string{"e", "d", "c", "b", "a"}, "", time.Minute, only("a", "b"), records.QuorumLost, []string{"c", "d", "e"}},
		{"one voter, reachable", []string{"a"}, "", time.Minute, only("a"), records.QuorumElecting, nil},
		{"configuration unknown", nil, "", time.Minute, only(), "", nil},
	} {
		got, waiting := JudgeQuorum(tc.voters, tc.leader, t0.Add(-tc.leaderless), t0, tc.reachable)
		if got != tc.want || !slices.Equal(waiting, tc.waiting) {
			t.Errorf("%s: %q waiting for %v, want %q waiting for %v", tc.name, got, waiting, tc.want, tc.waiting)
		}
	}
}

// A node hosting shard 0 (voters a, b, c) with its peers b and c killed
// at t0: while its replica names a leader the shard is ok; without one,
// electing while the grace runs or b and c answer; lost once neither
// has answered for reachableWithin; ok again with a leader.
func TestViewJudgesQuorumFromAnswersAndLeaderTimes(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var v View
	live := []mesh.NodeID{"a", "b", "c"}
	v.set("b", PeerView{}, t0)
	v.set("c", PeerView{}, t0)
	judge := func(at time.Duration, leader string, live []mesh.NodeID) records.ShardStatus {
		sh := []records.ShardStatus{{ID: 0, Leader: leader, Local: "follower", Voters: []string{"a", "b", "c"}}, {ID: 1}}
		v.JudgeQuorum("a", live, t0.Add(at), sh)
		if sh[1].Quorum != "" {
			t.Errorf("a shard not hosted here judged: %+v", sh[1])
		}
		return sh[0]
	}
	if sh := judge(0, "b", live); sh.Quorum != records.QuorumOK || sh.LeaderlessSeconds != 0 {
		t.Errorf("with a leader: %+v", sh)
	}
	if sh := judge(time.Second, "", live); sh.Quorum != records.QuorumElecting {
		t.Errorf("1 s without a leader: %+v", sh)
	}
	if sh := judge(2*time.Second, "", live); sh.Quorum != records.QuorumElecting {
		t.Errorf("b and c answered 2 s ago: %+v", sh)
	}
	sh := judge(reachableWithin+time.Millisecond, "", live)
	if sh.Quorum != records.QuorumLost || !slices.Equal(sh.WaitingFor, []string{"b", "c"}) || sh.LeaderlessSeconds != 2.501 {
		t.Errorf("b and c silent for %v: %+v", reachableWithin, sh)
	}
	if text := QuorumText(sh); text != "shard 0 lost its quorum: no leader for 2.5s; it needs 2 of its 3 voters and waits for b, c" {
		t.Errorf("QuorumText: %q", text)
	}
	v.set("c", PeerView{}, t0.Add(3*time.Second))
	if sh := judge(3*time.Second, "", live); sh.Quorum != records.QuorumElecting {
		t.Errorf("c answers again: %+v", sh)
	}
	if sh := judge(3*time.Second, "", []mesh.NodeID{"a", "b"}); sh.Quorum != records.QuorumLost || !slices.Equal(sh.WaitingFor, []string{"b", "c"}) {
		t.Errorf("c is no member, whatever it answered: %+v", sh)
	}
	if sh := judge(4*time.Second, "c", live); sh.Quorum != records.QuorumOK || len(sh.WaitingFor) != 0 {
		t.Errorf("a leader again: %+v", sh)
	}
	// The first sighting of a shard without a leader starts the grace.
	sh0 := []records.ShardStatus{{ID: 7, Local: "candidate", Voters: []string{"a", "b", "c"}}}
	v.JudgeQuorum("a", []mesh.NodeID{"a"}, t0.Add(10*time.Second), sh0)
	if sh0[0].Quorum != records.QuorumElecting {
		t.Errorf("first sighting: %+v", sh0[0])
	}
}

// On a mesh of more than viewPeers+1 members each peer is asked every
// few rounds, so its answer may be that much older and still count.
func TestReachableWithinScalesWithTheViewRounds(t *testing.T) {
	var v View
	if got := v.staleAfter(viewPeers + 1); got != reachableWithin {
		t.Errorf("%d members: %v", viewPeers+1, got)
	}
	if got := v.staleAfter(3*viewPeers + 1); got != reachableWithin+2*viewEvery {
		t.Errorf("%d members: %v", 3*viewPeers+1, got)
	}
}

// A node hosting no replica of shard 0 shows the last answer of its
// leader b until b stops answering; then the lost verdict of c, which
// hosts it, names the shard lost. A fresh leader's answer wins over a
// verdict (the majority side of a partition).
func TestFillShowsAHostsLostVerdictWhenTheLeaderIsSilent(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var v View
	voters := []string{"a", "b", "c"}
	v.set("b", PeerView{Shards: []records.ShardStatus{{ID: 0, Leader: "b", Term: 4, Local: "leader", Voters: voters, Pushes: 9}}}, t0)
	lost := records.ShardStatus{ID: 0, Term: 4, Local: "candidate", Voters: voters, Quorum: records.QuorumLost, WaitingFor: []string{"a", "b"}, LeaderlessSeconds: 2.6}
	v.set("c", PeerView{Shards: []records.ShardStatus{lost}}, t0.Add(time.Second))
	fill := func(at time.Duration) records.ShardStatus {
		s := Status{Node: "d", Now: t0.Add(at), Shards: []records.ShardStatus{{ID: 0}}}
		v.Fill(&s)
		return s.Shards[0]
	}
	if sh := fill(2 * time.Second); sh.Leader != "b" || sh.From != "b" || sh.Quorum != "" {
		t.Errorf("b answered 2 s ago: %+v", sh)
	}
	sh := fill(4 * time.Second)
	if sh.Leader != "" || sh.From != "c" || sh.AgeSeconds != 3 || sh.Quorum != records.QuorumLost || !slices.Equal(sh.WaitingFor, []string{"a", "b"}) {
		t.Errorf("b silent for 4 s: %+v", sh)
	}
	if text := QuorumText(sh); !strings.HasSuffix(text, "waits for a, b (as c sees it)") {
		t.Errorf("QuorumText: %q", text)
	}
	v.set("b", PeerView{Shards: []records.ShardStatus{{ID: 0, Leader: "b", Term: 4, Local: "leader", Voters: voters, Quorum: records.QuorumOK}}}, t0.Add(4*time.Second))
	if sh := fill(4 * time.Second); sh.Leader != "b" || sh.Quorum != records.QuorumOK {
		t.Errorf("b answers again as leader: %+v", sh)
	}
	// No member names a leader: the verdict is all there is.
	v.keep([]mesh.NodeID{"c"})
	if sh := fill(2 * time.Second); sh.Quorum != records.QuorumLost || sh.From != "c" {
		t.Errorf("only c's verdict: %+v", sh)
	}
}

func TestQuorumWatchRecordsLossOnceAndRegainOnce(t *testing.T) {
	t0 := time.Unix(1000, 0)
	events := NewEventLog(func() time.Time { return t0 })
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	var q quorumWatch
	voters := []string{"a", "b", "c"}
	ok := records.ShardStatus{ID: 3, Leader: "a", Term: 2, Voters: voters, Quorum: records.QuorumOK}
	lost := records.ShardStatus{ID: 3, Term: 2, Voters: voters, Quorum: records.QuorumLost, WaitingFor: []string{"b", "c"}, LeaderlessSeconds: 2.5}
	lostB := lost
	lostB.WaitingFor = []string{"b"}
	regained := records.ShardStatus{ID: 3, Leader: "c", Term: 3, Voters: voters, Quorum: records.QuorumOK}
	for _, sh := range []records.ShardStatus{ok, lost, lost, {ID: 3, Voters: voters, Quorum: records.QuorumElecting}, lostB, lostB, regained, regained} {
		q.observe(events, log, []records.ShardStatus{sh})
	}
	var kinds []string
	for _, e := range events.List() {
		kinds = append(kinds, e.Kind)
		if *e.Shard != 3 {
			t.Errorf("event of shard %d", *e.Shard)
		}
	}
	if want := []string{records.EventQuorumLost, records.EventQuorumLost, records.EventQuorumRegained}; !slices.Equal(kinds, want) {
		t.Errorf("events %v, want %v", kinds, want)
	}
	if e := events.List()[0]; e.Detail != "shard 3 lost its quorum: no leader for 2.5s; it needs 2 of its 3 voters and waits for b, c" {
		t.Errorf("detail %q", e.Detail)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "waiting_for=\"[b c]\"") ||
		!strings.Contains(lines[2], "level=INFO") || !strings.Contains(lines[2], "shard 3 regained its quorum: leader c, term 3") {
		t.Errorf("log lines:\n%s", logs.String())
	}
}

func TestSizeWatchWarnsOnceTheMeshSettlesBelowTheReplication(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var w sizeWatch
	for _, step := range []struct {
		at    time.Duration
		n     int
		level slog.Level
		msg   string
	}{
		{0, 1, 0, ""},           // the first node, alone
		{time.Second, 2, 0, ""}, // a second one joins
		{5900 * time.Millisecond, 2, 0, ""},
		{6 * time.Second, 2, slog.LevelWarn, "the mesh has 2 live member(s), fewer than the job's --replication 3: every shard has 2 voter(s) and survives no failure: one kill freezes them; start more nodes"},
		{7 * time.Second, 2, 0, ""},
		{8 * time.Second, 3, slog.LevelInfo, "the mesh has 3 live members, at least the job's --replication 3: every shard can have 3 voters again"},
		{20 * time.Second, 3, 0, ""},
		{21 * time.Second, 2, 0, ""},
		{26 * time.Second, 2, slog.LevelWarn, "the mesh has 2 live member(s)"},
		{27 * time.Second, 1, 0, ""},
		{32 * time.Second, 1, slog.LevelWarn, "the mesh has 1 live member(s)"},
	} {
		level, msg := w.observe(t0.Add(step.at), step.n, 3)
		if level != step.level || !strings.HasPrefix(msg, step.msg) || (step.msg == "") != (msg == "") {
			t.Errorf("at %v with %d members: %v %q, want %v %q", step.at, step.n, level, msg, step.level, step.msg)
		}
	}
	if got := MeshTooSmall(4, 5); got != "the mesh has 4 live member(s), fewer than the job's --replication 5: every shard has 4 voter(s) and survives 1 failure(s), where 5 voters survive 2; start more nodes" {
		t.Errorf("MeshTooSmall(4, 5) = %q", got)
	}
}

func TestWarningsAndMetricNameTheLostShard(t *testing.T) {
	spec := job.DefaultSpec()
	s := Status{Spec: &spec, Members: []MemberStatus{{ID: "a"}},
		Shards: []records.ShardStatus{
			{ID: 0, Leader: "a", Voters: []string{"a"}, Quorum: records.QuorumOK},
			{ID: 1, Voters: []string{"a", "b", "c"}, Quorum: records.QuorumLost, WaitingFor: []string{"b", "c"}, LeaderlessSeconds: 3},
			{ID: 2},
			{ID: 3, Leader: "b", Refused: "raftstore: shard 3: log store /d/shards/3/raft.db is empty; … remove /d/shards/3 …"},
			{ID: 4, Local: "follower", LeaderlessSeconds: 59}, // a fresh replica not added yet
			{ID: 5, Local: "follower", LeaderlessSeconds: 75}, // none added it for long
		}}
	w := Warnings(&s)
	if len(w) != 4 || !strings.HasPrefix(w[3], "shard 5: this node's replica has no Raft configuration and has seen no leader for 75s: it waits for the shard's leader to add it; if no member holds the shard any more") || !strings.HasPrefix(w[0], "the mesh has 1 live member(s), fewer than the job's --replication 3") ||
		w[1] != "shard 1 lost its quorum: no leader for 3.0s; it needs 2 of its 3 voters and waits for b, c" ||
		w[2] != "this node's replica of shard 3 cannot start: raftstore: shard 3: log store /d/shards/3/raft.db is empty; … remove /d/shards/3 …" {
		t.Errorf("warnings: %q", w)
	}
	m := NewMetrics(func() Status { return s })
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "dssp_shard_quorum_lost" {
			continue
		}
		for _, mt := range f.GetMetric() {
			got[mt.GetLabel()[0].GetName()+"="+mt.GetLabel()[0].GetValue()] = mt.GetGauge().GetValue()
		}
	}
	if len(got) != 2 || got["shard=0"] != 0 || got["shard=1"] != 1 {
		t.Errorf("dssp_shard_quorum_lost: %v, want shard 0 at 0, shard 1 at 1, none for shard 2", got)
	}
}
