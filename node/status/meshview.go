package status

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"dsspmesh/mesh"
	"dsspmesh/node/records"
)

// View cadence: every viewEvery a node asks up to viewPeers other live
// members, in turn, for their [PeerView] over the control channel, each
// call bounded by viewTimeout. On a mesh of up to viewPeers+1 nodes every
// peer is asked every second; on a larger one each peer's answer is at
// most ⌈(N−1)/viewPeers⌉ s old, and a node sends and answers viewPeers
// requests a second instead of N−1 (asking everyone made the view O(N²)
// requests a second mesh-wide: 999 a node at 1 000 nodes, docs/scale.md).
// It keeps /status answering from memory, never waiting on the network.
const (
	viewEvery   = time.Second
	viewTimeout = time.Second
	viewPeers   = 8
)

// PeerView is what a node tells others about itself (control op "view"):
// the shards it hosts, the clock table of the lowest shard it leads, and
// its own worker loop.
type PeerView struct {
	// HTTP is the answering node's HTTP address (Status.HTTP).
	HTTP    string                 `json:"http,omitempty"`
	Shards  []records.ShardStatus  `json:"shards"`
	Workers []records.WorkerStatus `json:"workers,omitempty"`
	Worker  *records.LocalWorker   `json:"worker,omitempty"`
	// Revocations are the node ids the answering node holds revoked, each
	// with the operator's MAC: the asking node checks the MAC itself and
	// takes the revocation (so a node that joined after it, hosting no
	// replica, learns it too).
	Revocations []Revocation `json:"revocations,omitempty"`
	// RTT is the answering node's least measured round trip to each
	// member it has a connection to, in milliseconds (mesh.RTTReporter):
	// with this node's own it gives the shard manager the distances
	// between voters (View.RTT).
	RTT map[string]float64 `json:"rtt_ms,omitempty"`
}

// Revocation is [records.Revocation].
type Revocation = records.Revocation

// View holds the latest answer of every live member; safe for
// concurrent use.
type View struct {
	mu    sync.Mutex
	peers map[mesh.NodeID]heardView
	// lastLeader is when JudgeQuorum last saw each shard hosted here
	// with a leader.
	lastLeader map[uint32]time.Time
}

type heardView struct {
	at   time.Time
	view PeerView
}

// Watch is what [View.Watch] asks of its node.
type Watch struct {
	Self    mesh.NodeID
	Members mesh.Membership
	// Ask asks member m for its view (control op "view"): the JSON
	// PeerView it answered.
	Ask func(ctx context.Context, m mesh.Member) ([]byte, error)
	// Shards is every shard as the node's status shows it (its own
	// replicas completed with this view).
	Shards func() []records.ShardStatus
	Events *EventLog
	Now    func() time.Time
	Logger *slog.Logger
	// Replication is the job's: Watch warns while the mesh has fewer
	// live members (sizeWatch).
	Replication int
}

// Watch refreshes the view of the other members and turns what it sees
// into leader and quorum events (and their log lines) until ctx ends.
func (v *View) Watch(ctx context.Context, w Watch) {
	t := time.NewTicker(viewEvery)
	defer t.Stop()
	var leaders leaderWatch
	var quorum quorumWatch
	var size sizeWatch
	next := 0
	for {
		next = v.refresh(ctx, w, next)
		shards := w.Shards()
		leaders.observe(w.Events, shards)
		quorum.observe(w.Events, w.Logger, shards)
		if level, msg := size.observe(w.Now(), len(w.Members.Members()), w.Replication); msg != "" {
			w.Logger.Log(ctx, level, msg)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// refresh asks viewPeers other live members, from the from-th in id
// order on, for their views at once and waits for the answers (each
// bounded by viewTimeout); it returns where the next call starts. A member
// that does not answer keeps its last answer, which ages; a member no
// longer live is forgotten.
func (v *View) refresh(ctx context.Context, w Watch, from int) int {
	members := w.Members.Members()
	var others []mesh.Member
	for _, m := range members {
		if m.ID != w.Self {
			others = append(others, m)
		}
	}
	ask, next := viewRound(others, from, viewPeers)
	var wg sync.WaitGroup
	for _, m := range ask {
		wg.Add(1)
		go func(m mesh.Member) {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, viewTimeout)
			defer cancel()
			payload, err := w.Ask(cctx, m)
			if err != nil {
				w.Logger.Debug("view", "peer", m.ID, "err", err)
				return
			}
			var pv PeerView
			if err := json.Unmarshal(payload, &pv); err != nil {
				w.Logger.Debug("view: bad answer", "peer", m.ID, "err", err)
				return
			}
			v.set(m.ID, pv, w.Now())
		}(m)
	}
	wg.Wait()
	v.keep(mesh.LiveIDs(members))
	return next
}

// viewRound picks the k members to ask this round: all of them when there
// are at most k, else k in id order from the from-th on, wrapping; next is
// where the following round starts.
func viewRound(others []mesh.Member, from, k int) (ask []mesh.Member, next int) {
	if len(others) <= k {
		return others, 0
	}
	sorted := slices.Clone(others)
	slices.SortFunc(sorted, func(a, b mesh.Member) int { return strings.Compare(string(a.ID), string(b.ID)) })
	from %= len(sorted)
	return append(sorted[from:], sorted[:from]...)[:k], from + k
}

func (v *View) set(id mesh.NodeID, pv PeerView, at time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.peers == nil {
		v.peers = map[mesh.NodeID]heardView{}
	}
	v.peers[id] = heardView{at: at, view: pv}
}

// keep forgets every member not in live.
func (v *View) keep(live []mesh.NodeID) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for id := range v.peers {
		if !slices.Contains(live, id) {
			delete(v.peers, id)
		}
	}
}

// Leader is the newest word of a peer that leads shard id — its own
// replica's record (Local "leader"), the highest term among the peers
// heard — and whether any peer reports leading it. Its AgeSeconds is how
// long ago that word was heard.
func (v *View) Leader(id uint32) (records.ShardStatus, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	var best *records.ShardStatus
	var bestAt time.Time
	for _, h := range v.peers {
		for j := range h.view.Shards {
			c := &h.view.Shards[j]
			if c.ID == id && c.Local == "leader" && (best == nil || c.Term > best.Term) {
				best, bestAt = c, h.at
			}
		}
	}
	if best == nil {
		return records.ShardStatus{}, false
	}
	out := *best
	out.Voters = slices.Clone(best.Voters)
	out.AgeSeconds = max(0, time.Since(bestAt).Seconds())
	return out, true
}

// RTT is the round trip between members a and b as a or b last reported
// it (the least of the two), and whether either did.
func (v *View) RTT(a, b mesh.NodeID) (time.Duration, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	best, ok := time.Duration(0), false
	for _, p := range [][2]mesh.NodeID{{a, b}, {b, a}} {
		ms, has := v.peers[p[0]].view.RTT[string(p[1])]
		if d := time.Duration(ms * float64(time.Millisecond)); has && ms >= 0 && (!ok || d < best) {
			best, ok = d, true
		}
	}
	return best, ok
}

// Fill completes s (built from this node's own replicas and worker) with
// what the other members said: every shard this node does not host, the
// clock table when this node leads no shard, and every member's worker.
// Whatever comes from a peer names it and says how old it is; a shard
// whose described leader stopped answering takes the lost verdict of a
// peer hosting it (fillLost).
func (v *View) Fill(s *Status) {
	v.mu.Lock()
	defer v.mu.Unlock()
	age := func(at time.Time) float64 { return max(0, s.Now.Sub(at).Seconds()) }
	for i := range s.Shards {
		sh := &s.Shards[i]
		if sh.Local != "" {
			continue
		}
		var best *records.ShardStatus
		var bestFrom mesh.NodeID
		var bestAt time.Time
		for id, h := range v.peers {
			for j := range h.view.Shards {
				c := &h.view.Shards[j]
				if c.ID != sh.ID || c.Leader == "" {
					continue
				}
				if best == nil || betterShardView(c, h.at, best, bestAt) {
					best, bestFrom, bestAt = c, id, h.at
				}
			}
		}
		if best != nil {
			sh.Leader, sh.Term, sh.Voters, sh.Applied, sh.Pushes = best.Leader, best.Term, best.Voters, best.Applied, best.Pushes
			sh.From, sh.AgeSeconds = string(bestFrom), age(bestAt)
			sh.Quorum, sh.WaitingFor, sh.LeaderlessSeconds = best.Quorum, best.WaitingFor, best.LeaderlessSeconds
		}
		v.fillLost(sh, best, bestAt, s.Now)
	}
	if len(s.Workers) == 0 {
		var bestAt time.Time
		for id, h := range v.peers {
			if len(h.view.Workers) > 0 && h.at.After(bestAt) {
				s.Workers, s.WorkersFrom, bestAt = h.view.Workers, string(id), h.at
			}
		}
		if s.WorkersFrom != "" {
			s.WorkersAgeSeconds = age(bestAt)
		}
	}
	leads := map[string]int{}
	for _, sh := range s.Shards {
		leads[sh.Leader]++
	}
	for i := range s.Members {
		m := &s.Members[i]
		if m.ID == s.Node {
			m.HTTP = s.HTTP
		} else if h, ok := v.peers[mesh.NodeID(m.ID)]; ok {
			m.HTTP = h.view.HTTP
		}
		m.Leads = leads[m.ID]
	}
	if s.Worker != nil {
		s.Trainers = append(s.Trainers, trainerStatus(s.Node, s.Worker, 0))
	}
	for id, h := range v.peers {
		if h.view.Worker != nil {
			s.Trainers = append(s.Trainers, trainerStatus(string(id), h.view.Worker, age(h.at)))
		}
	}
	slices.SortFunc(s.Trainers, func(a, b TrainerStatus) int {
		if a.ID < b.ID {
			return -1
		}
		if a.ID > b.ID {
			return 1
		}
		return 0
	})
}

// betterShardView prefers the leader's own answer, then the higher term,
// then the fresher answer.
func betterShardView(c *records.ShardStatus, cAt time.Time, b *records.ShardStatus, bAt time.Time) bool {
	cl, bl := c.Local == "leader", b.Local == "leader"
	if cl != bl {
		return cl
	}
	if c.Term != b.Term {
		return c.Term > b.Term
	}
	return cAt.After(bAt)
}

func trainerStatus(id string, w *records.LocalWorker, age float64) TrainerStatus {
	t := TrainerStatus{ID: id, Iter: w.Iter, ItersPerSec: w.ItersPerSec, Loss: w.Loss,
		ComputeSeconds: w.ComputeSeconds, WaitSeconds: w.WaitSeconds, AgeSeconds: age,
		Batch: w.Batch, PredictedSeconds: w.PredictedSeconds, LocalSteps: w.LocalSteps}
	if total := w.ComputeSeconds + w.WaitSeconds; total > 0 {
		t.WaitShare = w.WaitSeconds / total
	}
	return t
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
