package status

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"dsspmesh/mesh"
	"dsspmesh/node/records"
)

// Quorum timing (see "Quorum" in the package doc).
const (
	// QuorumGrace is how long a shard may have no leader, with fewer than
	// a majority of its voters reachable, before it is reported lost. An
	// election at the shards' 500 ms timeouts (stretched up to 3× on a
	// node hosting many groups) takes well under it.
	QuorumGrace = 2 * time.Second
	// reachableWithin is how old a voter's latest view answer may be
	// for the voter to count as reachable on a mesh whose every peer is
	// asked each round (up to viewPeers+1 nodes); a larger mesh adds a
	// viewEvery for every further round a peer waits for its turn.
	reachableWithin = 2500 * time.Millisecond
	// meshSettle is how long the member count must hold before the
	// mesh-too-small warning is logged, so a mesh whose nodes are still
	// joining logs nothing.
	meshSettle = 5 * time.Second
)

// JudgeQuorum is the quorum of one shard at now, as a node hosting a
// replica of it sees it: voters is its Raft configuration, leader the
// leader its replica knows ("" none), lastLeader the last time the node
// saw it with one, and reachable says whether a voter answers. It returns
// ok with a leader; lost when there has been none for QuorumGrace and
// fewer than a majority of voters are reachable, with the unreachable
// voters it waits for (sorted); electing otherwise; "" when voters is
// empty (the configuration is unknown).
func JudgeQuorum(voters []string, leader string, lastLeader, now time.Time, reachable func(string) bool) (state string, waitingFor []string) {
	switch {
	case len(voters) == 0:
		return "", nil
	case leader != "":
		return records.QuorumOK, nil
	}
	up := 0
	for _, v := range voters {
		if reachable(v) {
			up++
		} else {
			waitingFor = append(waitingFor, v)
		}
	}
	if now.Sub(lastLeader) < QuorumGrace || up >= len(voters)/2+1 {
		return records.QuorumElecting, nil
	}
	slices.Sort(waitingFor)
	return records.QuorumLost, waitingFor
}

// JudgeQuorum sets Quorum, WaitingFor and LeaderlessSeconds on every
// shard of shards this node hosts (Local set) from its replica's leader
// and voters: a voter is reachable when it is self, or a member of live
// whose latest view answer is recent (reachableWithin; a member not asked
// yet counts as reachable). The View remembers when it last saw each
// shard with a leader; the first sighting counts as one.
func (v *View) JudgeQuorum(self mesh.NodeID, live []mesh.NodeID, now time.Time, shards []records.ShardStatus) {
	v.mu.Lock()
	defer v.mu.Unlock()
	stale := v.staleAfter(len(live))
	reachable := func(id string) bool {
		if id == string(self) {
			return true
		}
		if !slices.Contains(live, mesh.NodeID(id)) {
			return false
		}
		h, ok := v.peers[mesh.NodeID(id)]
		return !ok || now.Sub(h.at) <= stale
	}
	if v.lastLeader == nil {
		v.lastLeader = map[uint32]time.Time{}
	}
	for i := range shards {
		sh := &shards[i]
		if sh.Local == "" {
			continue
		}
		last, seen := v.lastLeader[sh.ID]
		if sh.Leader != "" || !seen {
			last = now
			v.lastLeader[sh.ID] = now
		}
		sh.Quorum, sh.WaitingFor = JudgeQuorum(sh.Voters, sh.Leader, last, now, reachable)
		if sh.Leader == "" {
			sh.LeaderlessSeconds = max(0, now.Sub(last).Seconds())
		}
	}
}

// staleAfter is how old a peer's latest answer may be for it to count as
// reachable on a mesh of n members; v.mu held.
func (v *View) staleAfter(n int) time.Duration {
	rounds := max(1, (n-1+viewPeers-1)/viewPeers)
	return reachableWithin + time.Duration(rounds-1)*viewEvery
}

// lostReport is the newest answer of a peer hosting shard id that judged
// it lost, with who gave it and when; v.mu held.
func (v *View) lostReport(id uint32) (*records.ShardStatus, mesh.NodeID, time.Time) {
	var best *records.ShardStatus
	var from mesh.NodeID
	var at time.Time
	for pid, h := range v.peers {
		for j := range h.view.Shards {
			c := &h.view.Shards[j]
			if c.ID == id && c.Quorum == records.QuorumLost && (best == nil || h.at.After(at)) {
				best, from, at = c, pid, h.at
			}
		}
	}
	return best, from, at
}

// fillLost lets a peer's lost verdict on shard sh (not hosted here)
// replace the description Fill chose (best, answered at bestAt; nil if
// none named a leader) when that description is older than the verdict
// and no longer fresh: the leader it names has stopped answering. A
// fresh answer of a leader wins, as on the majority side of a partition.
// v.mu held.
func (v *View) fillLost(sh *records.ShardStatus, best *records.ShardStatus, bestAt, now time.Time) {
	lost, from, at := v.lostReport(sh.ID)
	if lost == nil {
		return
	}
	if best != nil && (!at.After(bestAt) || now.Sub(bestAt) <= v.staleAfter(len(v.peers)+1) || lost.Term < best.Term) {
		return
	}
	sh.Leader, sh.Term, sh.Voters, sh.Applied, sh.Pushes = "", lost.Term, lost.Voters, lost.Applied, lost.Pushes
	sh.Quorum, sh.WaitingFor, sh.LeaderlessSeconds = lost.Quorum, lost.WaitingFor, lost.LeaderlessSeconds
	sh.From, sh.AgeSeconds = string(from), max(0, now.Sub(at).Seconds())
}

// QuorumText is the sentence that names a lost shard and the voters it
// waits for: the event's detail, the log line's message, the warning
// of /status, the dashboard and `dssp status`.
func QuorumText(sh records.ShardStatus) string {
	t := fmt.Sprintf("shard %d lost its quorum: no leader for %.1fs; it needs %d of its %d voters and waits for %s",
		sh.ID, sh.LeaderlessSeconds, len(sh.Voters)/2+1, len(sh.Voters), strings.Join(sh.WaitingFor, ", "))
	if sh.From != "" {
		t += " (as " + sh.From + " sees it)"
	}
	return t
}

// MeshTooSmall is the warning for a mesh of n live members running a job
// of replication r, or "" when n ≥ r. Placement then gives every shard n
// voters, which survive (n−1)/2 failures.
func MeshTooSmall(n, r int) string {
	if n >= r || n <= 0 {
		return ""
	}
	survives := "no failure: one kill freezes them"
	if f := (n - 1) / 2; f > 0 {
		survives = fmt.Sprintf("%d failure(s), where %d voters survive %d", f, r, (r-1)/2)
	}
	return fmt.Sprintf("the mesh has %d live member(s), fewer than the job's --replication %d: every shard has %d voter(s) and survives %s; start more nodes",
		n, r, n, survives)
}

// Warnings are what an operator must act on, as s shows it: a job that
// survives no failure (--replication 1), a mesh with fewer live members
// than the job's replication, and every shard that lost its quorum
// (QuorumText).
func Warnings(s *Status) []string {
	var out []string
	if s.Spec != nil {
		if w := s.Spec.ReplicationWarning(); w != "" {
			out = append(out, w)
		}
		if w := MeshTooSmall(len(s.Members), s.Spec.Replication); w != "" {
			out = append(out, w)
		}
	}
	for _, sh := range s.Shards {
		if sh.Quorum == records.QuorumLost {
			out = append(out, QuorumText(sh))
		}
	}
	return out
}

// quorumWatch turns successive views of the shards into quorum events and
// log lines: one WARN and a quorum-lost event when a shard is seen lost
// (again when the voters it waits for change), one INFO and a
// quorum-regained event when a shard seen lost has a leader again.
type quorumWatch struct {
	lost map[uint32][]string // shards seen lost → the voters they wait for
}

func (q *quorumWatch) observe(l *EventLog, log *slog.Logger, shards []records.ShardStatus) {
	if q.lost == nil {
		q.lost = map[uint32][]string{}
	}
	for _, sh := range shards {
		id := sh.ID
		waiting, was := q.lost[id]
		switch {
		case sh.Quorum == records.QuorumLost && (!was || !slices.Equal(waiting, sh.WaitingFor)):
			q.lost[id] = sh.WaitingFor
			text := QuorumText(sh)
			l.Add(records.Event{Kind: records.EventQuorumLost, Shard: &id, Term: sh.Term, Detail: text})
			log.Warn(text, "shard", id, "waiting_for", sh.WaitingFor, "voters", sh.Voters, "term", sh.Term)
		case was && sh.Quorum == records.QuorumOK:
			delete(q.lost, id)
			text := fmt.Sprintf("shard %d regained its quorum: leader %s, term %d", id, sh.Leader, sh.Term)
			l.Add(records.Event{Kind: records.EventQuorumRegained, Node: sh.Leader, Shard: &id, Term: sh.Term, Detail: text})
			log.Info(text, "shard", id, "leader", sh.Leader, "term", sh.Term)
		}
	}
}

// sizeWatch decides when to log that the mesh has fewer live members than
// the job's replication: at WARN once the count has held below it for
// meshSettle (again at each new count below it), at INFO once it reaches
// the replication after such a warning.
type sizeWatch struct {
	count  int
	since  time.Time
	warned int // the count last warned about; 0 none
}

func (w *sizeWatch) observe(now time.Time, n, r int) (level slog.Level, msg string) {
	if n != w.count || w.since.IsZero() {
		w.count, w.since = n, now
	}
	switch {
	case n < r && w.warned != n && now.Sub(w.since) >= meshSettle:
		w.warned = n
		return slog.LevelWarn, MeshTooSmall(n, r)
	case n >= r && w.warned != 0:
		w.warned = 0
		return slog.LevelInfo, fmt.Sprintf("the mesh has %d live members, at least the job's --replication %d: every shard can have %d voters again", n, r, r)
	}
	return 0, ""
}

// descQuorumLost is one gauge per shard this node knows the quorum of.
var descQuorumLost = prometheus.NewDesc("dssp_shard_quorum_lost",
	"1 while the shard has lost its quorum as this node sees it (no leader and fewer than a majority of its voters reachable), else 0; only shards whose quorum this node knows.",
	[]string{"shard"}, nil)

type quorumCollector struct{ status func() Status }

func (c quorumCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descQuorumLost }

func (c quorumCollector) Collect(ch chan<- prometheus.Metric) {
	for _, sh := range c.status().Shards {
		if sh.Quorum != "" {
			ch <- prometheus.MustNewConstMetric(descQuorumLost, prometheus.GaugeValue, b2f(sh.Quorum == records.QuorumLost), itoa(sh.ID))
		}
	}
}
