package status

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

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
	// NoConfigurationGrace is how long a replica hosted here may have no
	// Raft configuration and see no leader before /status warns: a fresh
	// replica has none until the shard's leader adds it and sends it a
	// snapshot (seconds; a large model's snapshot, tens of seconds), and
	// one has none for good when no member holds the shard any more.
	NoConfigurationGrace = 60 * time.Second
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

// NoConfiguration is the warning for a replica hosted here that has had
// no Raft configuration and no leader for NoConfigurationGrace, or "". It
// waits for the shard's leader to add it; when no member holds the shard
// any more (every replica's store removed) none ever will, and training
// waits for the shard for good.
func NoConfiguration(sh records.ShardStatus) string {
	if sh.Local == "" || sh.From != "" || len(sh.Voters) > 0 || sh.Leader != "" || sh.LeaderlessSeconds < NoConfigurationGrace.Seconds() {
		return ""
	}
	return fmt.Sprintf("shard %d: this node's replica has no Raft configuration and has seen no leader for %.0fs: it waits for the shard's leader to add it; "+
		"if no member holds the shard any more (every replica's store lost or removed), it never will: start a new mesh from the newest checkpoint (--init-from)",
		sh.ID, sh.LeaderlessSeconds)
}

// Warnings are what an operator must act on, as s shows it: a job that
// survives no failure (--replication 1), a mesh with fewer live members
// than the job's replication, every shard that lost its quorum
// (QuorumText), every replica placed here that cannot start (its store
// damaged: the file and the remedy), every replica here that diverged
// (the agreement check), and every replica here that has had no
// configuration for long (NoConfiguration).
func Warnings(s *Status) []string {
	var out []string
	if s.RevokedSelf != "" {
		out = append(out, s.RevokedSelf+"; this node stops")
	}
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
		if sh.Refused != "" {
			out = append(out, fmt.Sprintf("this node's replica of shard %d cannot start: %s", sh.ID, sh.Refused))
		}
		if sh.Diverged != "" {
			out = append(out, fmt.Sprintf("this node's replica of shard %d diverged: %s", sh.ID, sh.Diverged))
		}
		if w := NoConfiguration(sh); w != "" {
			out = append(out, w)
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
