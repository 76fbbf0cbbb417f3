package shards

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"dsspmesh/clock"
	"dsspmesh/internal/faults"
	"dsspmesh/mesh"
	"dsspmesh/node/records"
	"dsspmesh/shardapi"

	"github.com/prometheus/client_golang/prometheus"
)

// Manager runs this node's replicas and follows placement: it starts a
// replica for every shard placed here (or with state on disk), has the
// leader of each shard move the Raft configuration toward the placement one
// change at a time (add before remove; a leader outside the placement
// hands its leadership to a placed voter first) and remove workers that left the
// membership from the clock table, and shuts down replicas the leader has
// removed.
type Manager struct {
	d      Deps
	cfg    Config
	bounds [][2]int // flat-vector range of each shard

	mu       sync.Mutex // guards replicas, refused and reconciling; never held across Raft calls
	replicas map[uint32]Replica
	// refused is why this node's replica of a shard could not start (a
	// damaged store: raftstore.DamagedError names the file and the
	// remedy), until it starts; shown in Status, logged once per reason.
	refused map[uint32]string
	// diverged says, per shard, that this node's replica diverged and
	// where its rebuild stands (Status), until the rebuilt replica opens.
	diverged map[uint32]string
	// rebuilding marks a shard whose evicted replica rebuild is shutting
	// down and discarding: none is opened meanwhile (it would open on the
	// stores being removed).
	rebuilding map[uint32]bool
	// reconciling is the reconcile step running per shard this node
	// leads, with the placement it works toward (reconcile).
	reconciling map[uint32]*reconcileStep
	peers       []string // gossip addresses last persisted

	places *placementCache

	transferring atomic.Bool // a leadership hand-over runs (handLeadOver)

	// bootstrapping: Start opens the replicas of a fresh mesh, which
	// start the shards rather than heal them; guarded by mu.
	bootstrapping bool

	// openedRTT is the round trip each replica here opened with
	// (ReplicaHooks.RTT), retimedAt when retime last reopened it; both
	// guarded by mu.
	openedRTT map[uint32]time.Duration
	retimedAt map[uint32]time.Time
	// heals follows each replica that opened here empty (heal.go).
	heals *heals
	// voters is when the manager first saw each replica count this node
	// a voter (removed); guarded by mu.
	voters map[uint32]voterMark
}

// Deps are the shard manager's edges, built by the node that runs it.
type Deps struct {
	ID       mesh.NodeID
	Replicas Replicas
	Members  mesh.Membership
	// Observer sees every entry the replicas apply and every term they lead.
	Observer records.Observer
	// Event records a term this node's replica leads.
	Event func(records.Event)
	// ApplySeconds observes the leaders' proposal-to-application times.
	ApplySeconds prometheus.Observer
	// Diverged counts this node's replicas that diverged (may be nil).
	Diverged prometheus.Counter
	// SetPeers persists the other members' gossip addresses (the data dir).
	SetPeers func(peers []string) error
	// PeerShards completes this node's own shard records with what the
	// other members said (the node's mesh view): leaders of the shards it
	// does not host.
	PeerShards func(own []records.ShardStatus) []records.ShardStatus
	// PeerLeader is the shard's leader as a peer leading it last reported
	// itself (its term and voters), the highest term heard; false when no
	// peer reports leading it. Nil: never heard.
	PeerLeader func(shard uint32) (records.ShardStatus, bool)
	// RTT is the least measured round trip between two members (this
	// node's own measurement, or a peer's word through the mesh view);
	// false when unknown. It places leaders near a quorum of their
	// voters (leadMove). Nil: never known.
	RTT func(a, b mesh.NodeID) (time.Duration, bool)
	// Theta is the parameters a fresh mesh starts from (--init-from, or
	// the model's initialisation from the job's seed), asked once.
	Theta  func() []float32
	Logger *slog.Logger
}

// Config is the job as the shard manager runs it.
type Config struct {
	// NumParams is the model's parameter count, cut into Spec.Shards.
	NumParams int
	Shards    int
	// Replication is the replicas per shard placement asks for.
	Replication int
	// Spec is every shard's spec but its Shard and Len.
	Spec shardapi.Spec
}

// New is a shard manager for cfg; Start starts it.
func New(d Deps, cfg Config) *Manager {
	if d.Observer == nil {
		d.Observer = records.NoObserver{}
	}
	m := &Manager{d: d, cfg: cfg, bounds: Bounds(cfg.NumParams, cfg.Shards), replicas: map[uint32]Replica{}, refused: map[uint32]string{}, diverged: map[uint32]string{}, rebuilding: map[uint32]bool{},
		reconciling: map[uint32]*reconcileStep{}, places: newPlacementCache(cfg.Shards, cfg.Replication),
		openedRTT: map[uint32]time.Duration{}, retimedAt: map[uint32]time.Time{}, voters: map[uint32]voterMark{}}
	m.heals = newHeals(func(id uint32, detail string) {
		m.d.Logger.Info("heal: "+detail, "shard", id)
		if m.d.Event != nil {
			m.d.Event(records.Event{Kind: records.EventHeal, Node: string(m.d.ID), Shard: &id, Detail: fmt.Sprintf("shard %d: %s", id, detail)})
		}
	})
	return m
}

// Bounds is each shard's range of the flat parameter vector.
func (m *Manager) Bounds() [][2]int { return m.bounds }

// Bounds cuts total parameters into s contiguous ranges.
func Bounds(total, s int) [][2]int {
	b := make([][2]int, s)
	for i := range b {
		b[i] = [2]int{i * total / s, (i + 1) * total / s}
	}
	return b
}

// Start brings up the replicas with state on disk and those placed here;
// on a fresh mesh it bootstraps every shard with this node as sole voter
// and proposes Init with θ from --init-from, or else from the spec's seed.
func (m *Manager) Start(ctx context.Context, fresh bool) error {
	fresh = fresh || faults.On(faults.SplitBrain) // broken builds only
	m.setBootstrapping(fresh)
	defer m.setBootstrapping(false)
	for s := range m.bounds {
		id := uint32(s)
		if fresh || m.d.Replicas.HasState(id) || m.placedHere(id) {
			if _, err := m.replica(id); err != nil {
				return err
			}
		}
	}
	if !fresh {
		return nil
	}
	theta := m.d.Theta()
	// The shards bootstrap concurrently: each waits out an election
	// timeout before its sole voter leads, and one after the other that
	// took S × 0.5–1 s (30 s for 64 shards; dssp-lab bench scale).
	sem := make(chan struct{}, bootstrapParallel)
	errs := make([]error, len(m.bounds))
	var wg sync.WaitGroup
	for s, b := range m.bounds {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[s] = m.bootstrapShard(ctx, uint32(s), b, theta)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	m.d.Logger.Info("bootstrapped shards", "shards", len(m.bounds))
	return nil
}

func (m *Manager) setBootstrapping(on bool) {
	m.mu.Lock()
	m.bootstrapping = on
	m.mu.Unlock()
}

// bootstrapParallel bounds the shards bootstrapping at once.
const bootstrapParallel = 16

// bootstrapShard makes this node the sole voter of shard id, waits until it
// leads, and proposes Init with its slice b of theta.
func (m *Manager) bootstrapShard(ctx context.Context, id uint32, b [2]int, theta []float32) error {
	rep, _ := m.replica(id)
	if err := rep.Bootstrap([]mesh.NodeID{m.d.ID}); err != nil {
		return err
	}
	if err := waitLeader(ctx, rep, 30*time.Second); err != nil {
		return err
	}
	spec := m.cfg.Spec
	spec.Shard, spec.Len = id, b[1]-b[0]
	if err := rep.Init(ctx, spec, theta[b[0]:b[1]]); err != nil {
		return fmt.Errorf("shard %d: init: %w", id, err)
	}
	return nil
}

// waitLeader waits until rep leads its shard, woken by its leadership
// changes.
func waitLeader(ctx context.Context, rep Replica, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for changed := rep.LeaderChanged(); !rep.IsLeader(); changed = rep.LeaderChanged() {
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("no leader elected within %v: %w", limit, ctx.Err())
		}
	}
	return nil
}

// replica returns this node's replica of shard id, starting it if needed.
func (m *Manager) replica(id uint32) (Replica, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.replicas[id]; ok {
		return r, nil
	}
	if m.rebuilding[id] {
		return nil, errRebuilding
	}
	d := m.d
	empty := !d.Replicas.HasState(id)
	groups := max(len(m.replicas)+1, m.placedCount())
	rtt := m.rttTo(m.placement(id))
	rep, err := d.Replicas.Open(id, ReplicaHooks{
		Groups:         groups,
		EntryBytes:     int64(m.cfg.Spec.Precision.Bytes(m.bounds[id][1] - m.bounds[id][0])),
		RTT:            rtt,
		Applied:        func(a shardapi.Applied) { d.Observer.Applied(id, a) },
		StateHashEvery: d.Observer.StateHashEvery(),
		Leading: func(term uint64) {
			d.Observer.Leading(id, term)
			d.Event(records.Event{Kind: records.EventLeader, Node: string(d.ID), Shard: &id, Term: term, Detail: fmt.Sprintf("shard %d: this node leads", id)})
		},
		ApplyTime: func(t time.Duration) { d.ApplySeconds.Observe(t.Seconds()) },
		// Raft streams from outside the shard's configuration are refused
		// unless placement assigns the peer to the shard.
		AllowRaftPeer: func(p mesh.NodeID) bool { return slices.Contains(m.placement(id), p) },
		Diverged:      func(dv shardapi.Divergence) { m.divergedReplica(id, dv) },
		Evicted:       func() { go m.rebuild(id) },
	})
	if err != nil {
		if name := fmt.Sprintf("shard %d: ", id); !strings.Contains(err.Error(), name) {
			err = fmt.Errorf("%s%w", name, err) // (raftstore's errors name it already)
		}
		return nil, err
	}
	delete(m.refused, id)
	m.replicas[id] = rep
	m.openedRTT[id] = rtt
	if empty && !m.bootstrapping {
		m.heals.note(id, time.Now())
	}
	return rep, nil
}

// rttTo is the longest round trip measured from this node to any of
// nodes (0: none measured).
func (m *Manager) rttTo(nodes []mesh.NodeID) time.Duration {
	var most time.Duration
	for _, n := range nodes {
		if m.d.RTT == nil || n == m.d.ID {
			continue
		}
		if d, ok := m.d.RTT(m.d.ID, n); ok {
			most = max(most, d)
		}
	}
	return most
}

// Raft timing follows the measured round trip (shard.Config.ForRTT: a
// lease of 4 × the longest round trip to the group's other replicas, from
// the default 250 ms up). A replica takes its timing when it opens, and
// raft cannot change the lease later; the bootstrap node opens every shard
// alone, knowing no round trip, so across a long one its leader would
// step down after every election it won while a quorum of its group lies
// across the link. So a replica whose voters' round trip now needs a
// longer lease than it opened with (needsRetiming) is reopened on its
// store with the new timing, at most once a retimeEvery per shard.
const (
	defaultLease   = 250 * time.Millisecond // shard.DefaultConfig's LeaderLeaseTimeout
	rttLeaseFactor = 4                      // shard.RTTLeaseFactor
	retimeEvery    = time.Minute
)

// needsRetiming reports whether a round trip of now needs a longer lease
// than one of opened gave: now beyond what the default lease holds and a
// quarter beyond opened (a round trip that drifts does not reopen).
func needsRetiming(now, opened time.Duration) bool {
	return rttLeaseFactor*now > defaultLease && now > opened*5/4
}

// retime reopens rep, this node's replica of shard id, when its voters'
// round trip needs a longer Raft timing than it opened with; it reports
// whether it did (rep is then closed).
func (m *Manager) retime(id uint32, rep Replica, now time.Time) bool {
	c, err := rep.Configuration()
	if err != nil {
		return false
	}
	rtt := m.rttTo(c.Voters)
	m.mu.Lock()
	opened, last := m.openedRTT[id], m.retimedAt[id]
	due := needsRetiming(rtt, opened) && now.Sub(last) >= retimeEvery && m.replicas[id] == rep
	if due {
		m.dropLocked(id)
		m.retimedAt[id] = now
	}
	m.mu.Unlock()
	if !due {
		return false
	}
	m.d.Logger.Info("reopening the replica: its voters' round trip needs a longer Raft timing", "shard", id, "rtt", rtt, "opened_with", opened)
	rep.Shutdown()
	if _, err := m.replica(id); err != nil {
		m.refuse(id, err)
	}
	return true
}

// reopenStopped closes rep, this node's replica of shard id, when its raft
// has stopped itself, and reopens it from its stores where placement still
// names this node (placed); it reports whether it did (rep is then closed).
// Raft stops a server once the server commits a configuration that
// removes it: a leader whose reconcile step removed itself, a follower
// that heard of its own removal. The manager owns a replica's life, so
// such a replica is closed here; kept open it answered nothing and never
// voted again, and once placement named its node again the leader's
// reconcile step added it back as a voter the shard then waited on: no
// quorum for 4 minutes (the long tier, seed 2, after a SIGSTOP of a
// leader). Reopened, it starts as a follower outside the configuration,
// and the leader adds it as a non-voter and catches it up before it
// votes. A diverged replica is left to rebuild, which discards its stores:
// its own status says so before its raft stops (the manager's mark comes
// after, from Deps.OnDiverged), so one read between the two is not
// reopened — reopened, it replayed its damaged entry again, and its
// closing ended the wait for its eviction.
func (m *Manager) reopenStopped(id uint32, rep Replica, placed bool) bool {
	if rs := rep.Status(); rs.State != "Shutdown" || rs.Diverged != nil || m.wasDiverged(id) {
		return false
	}
	m.mu.Lock()
	due := m.replicas[id] == rep
	if due {
		m.dropLocked(id)
	}
	m.mu.Unlock()
	if !due {
		return false
	}
	rep.Shutdown()
	if !placed {
		m.d.Logger.Info("replica removed from its shard and no longer placed here; closed", "shard", id)
		return true
	}
	m.d.Logger.Info("reopening the replica: its raft stopped when this node was removed from the shard; the leader adds it back", "shard", id)
	if _, err := m.replica(id); err != nil {
		m.refuse(id, err)
	}
	return true
}

// nearestFirst orders nodes by the round trip measured to them, nearest
// first, unmeasured ones last in their order: reconcile adds replicas in
// this order, so a group's second voter is a near one where placement
// names one, and its quorum does not wait on the far link while it grows.
func (m *Manager) nearestFirst(nodes []mesh.NodeID) []mesh.NodeID {
	if m.d.RTT == nil {
		return nodes
	}
	rtt := func(n mesh.NodeID) time.Duration {
		if d, ok := m.d.RTT(m.d.ID, n); ok {
			return d
		}
		return time.Duration(1<<63 - 1)
	}
	out := slices.Clone(nodes)
	slices.SortStableFunc(out, func(a, b mesh.NodeID) int { return cmp.Compare(rtt(a), rtt(b)) })
	return out
}

// divergedReplica records that this node's replica of shard id diverged
// (the agreement check; the replica logged its one ERROR line and stopped
// voting and serving): an event, the counter, and its shard's status
// until the rebuilt replica opens.
func (m *Manager) divergedReplica(id uint32, dv shardapi.Divergence) {
	why := fmt.Sprintf("at index %d, %s; it stopped voting and serving and is rebuilt from its peers once the shard's leader evicts it", dv.At, dv.Reason)
	m.mu.Lock()
	m.diverged[id] = why
	m.mu.Unlock()
	if m.d.Diverged != nil {
		m.d.Diverged.Inc()
	}
	if m.d.Event != nil {
		m.d.Event(records.Event{Kind: records.EventReplicaDiverged, Node: string(m.d.ID), Shard: &id, Detail: fmt.Sprintf("shard %d: this node's replica diverged %s", id, why)})
	}
}

func (m *Manager) wasDiverged(id uint32) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.diverged[id]
	return ok
}

// votesIn reports whether rep's configuration counts this node a voter.
func (m *Manager) votesIn(rep Replica) bool {
	c, err := rep.Configuration()
	return err == nil && slices.Contains(c.Voters, m.d.ID)
}

// agrees clears what Status says of a replica of shard id that diverged.
func (m *Manager) agrees(id uint32) {
	m.mu.Lock()
	delete(m.diverged, id)
	m.mu.Unlock()
}

// errRebuilding: the shard's replica is not opened while its evicted
// predecessor's stores are being discarded (rebuild).
var errRebuilding = errors.New("the replica's evicted predecessor is being discarded")

// rebuild discards this node's replica of shard id, which diverged and
// which the leader has evicted (it is no voter any more, so its state may
// go): it is shut down, its stores removed, and the next round opens it
// afresh where placement assigns it here, for the leader to catch up.
func (m *Manager) rebuild(id uint32) {
	m.mu.Lock()
	rep := m.replicas[id]
	m.dropLocked(id)
	m.rebuilding[id] = true
	m.diverged[id] = "evicted by the shard's leader; rebuilding it from its peers"
	m.mu.Unlock()
	if rep != nil {
		rep.Shutdown()
	}
	err := m.d.Replicas.Discard(id)
	m.mu.Lock()
	delete(m.rebuilding, id)
	m.mu.Unlock()
	if err != nil {
		m.d.Logger.Error("discard the diverged replica's stores", "shard", id, "err", err)
		return
	}
	m.d.Logger.Info("discarded the evicted diverged replica; it opens afresh and catches up from its peers", "shard", id)
	m.mu.Lock()
	if _, open := m.replicas[id]; !open {
		m.diverged[id] = "evicted by the shard's leader; rebuilt afresh, catching up from its peers"
	}
	m.mu.Unlock()
}

// refuse records that this node's replica of shard id, placed here after
// the node started, could not start: a damaged store found then is named
// (the error says the file, the problem and the remedy) and the node goes
// on without that replica, its other replicas and its worker unharmed.
// Tried again every round, it is logged and recorded as an event once per
// distinct reason, not every 300 ms, and shown in Status until it starts.
func (m *Manager) refuse(id uint32, err error) {
	m.mu.Lock()
	same := m.refused[id] == err.Error()
	m.refused[id] = err.Error()
	m.mu.Unlock()
	if same {
		return
	}
	m.d.Logger.Error("this node's replica of the shard cannot start; the node goes on without it", "shard", id, "err", err)
	if m.d.Event != nil {
		m.d.Event(records.Event{Kind: records.EventReplicaRefused, Node: string(m.d.ID), Shard: &id, Detail: err.Error()})
	}
}

func (m *Manager) local(id uint32) Replica {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.replicas[id]
}

func (m *Manager) placement(id uint32) []mesh.NodeID {
	return slices.Clone(m.places.get(mesh.PlacedIDs(m.d.Members.Members()))[id])
}

// placedCount is how many shards placement assigns this node now.
func (m *Manager) placedCount() int {
	n := 0
	for _, p := range m.places.get(mesh.PlacedIDs(m.d.Members.Members())) {
		if slices.Contains(p, m.d.ID) {
			n++
		}
	}
	return n
}

func (m *Manager) placedHere(id uint32) bool {
	return slices.Contains(m.placement(id), m.d.ID)
}

// Candidates is where a worker looks for shard id's leader: the replicas
// placement names first, then every other live member (during a move the
// Raft configuration lags placement).
func (m *Manager) Candidates(id uint32) []mesh.NodeID {
	out := m.placement(id)
	for _, mem := range m.d.Members.Members() {
		if !slices.Contains(out, mem.ID) {
			out = append(out, mem.ID)
		}
	}
	return out
}

// Run follows membership until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	t := time.NewTicker(300 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m.sync(ctx)
	}
}

func (m *Manager) sync(ctx context.Context) {
	m.heals.follow(time.Now(), func(id uint32) (shardapi.ReplicaStatus, bool, bool) {
		rep := m.local(id)
		if rep == nil {
			return shardapi.ReplicaStatus{}, false, false
		}
		return rep.Status(), m.votesIn(rep), true
	})
	members := m.d.Members.Members()
	live := map[mesh.NodeID]bool{}
	var peers []string
	for _, mem := range members {
		live[mem.ID] = true
		if mem.ID != m.d.ID {
			peers = append(peers, mem.Addr)
		}
	}
	if len(peers) > 0 && !slices.Equal(peers, m.peers) {
		if err := m.d.SetPeers(peers); err == nil {
			m.peers = peers
		}
	}
	liveIDs := mesh.PlacedIDs(members)
	places := m.places.get(liveIDs)
	led := 0
	for _, rep := range m.all() {
		if rep.IsLeader() {
			led++
		}
	}
	var leads map[mesh.NodeID]int
	if led > 0 && len(liveIDs) > 1 {
		leads = m.leads()
	}
	share := (len(m.bounds) + max(len(liveIDs), 1) - 1) / max(len(liveIDs), 1)
	for s := range m.bounds {
		id := uint32(s)
		want := slices.Clone(places[id])
		rep := m.local(id)
		if rep == nil {
			if slices.Contains(want, m.d.ID) {
				if _, err := m.replica(id); err != nil && !errors.Is(err, errRebuilding) {
					m.refuse(id, err)
				}
			} else {
				m.agrees(id)
			}
			continue
		}
		if m.wasDiverged(id) {
			// A rebuilt replica holds the shard's state once a check matched
			// it, or once the leader made it a voter again: the leader
			// promotes a replica only caught up from its log (and the next
			// check names it again if it differs).
			if rs := rep.Status(); rs.Diverged == nil && (rs.Checks.Matched > 0 || m.votesIn(rep)) {
				m.agrees(id)
			}
		}
		if m.reopenStopped(id, rep, slices.Contains(want, m.d.ID)) {
			continue
		}
		if m.retime(id, rep, time.Now()) {
			continue
		}
		if rep.IsLeader() {
			m.removeGoneWorkers(ctx, rep, live)
			m.reconcile(ctx, id, rep, m.nearestFirst(want))
			if leads != nil && m.handLeadOver(rep, want, leads, led, share) {
				led--
			}
			continue
		}
		if !slices.Contains(want, m.d.ID) && m.removed(id, rep, time.Now()) {
			m.stopReplica(id)
		}
	}
}

// Leaders spread, near a quorum. A fresh mesh's bootstrap node leads
// every shard, so every worker's pushes and replies pass through it and
// one kill moves every leader; with a 100 MB model that is tens of
// megabytes per push per shard on one node (its memory and CPU were the
// mesh's bottleneck in bench bigmodel). So each round (leadMove), on a
// shard whose configuration is already placement's:
//
//   - near a quorum: a leader whose commits wait on a far voter while
//     another voter has a quorum near it (two sites: the shard's majority
//     lies on the other site) hands the shard to the near voter leading
//     fewest. Near is by measured round trip (Deps.RTT): a voter's
//     distance is its round trip to the nearest voters that make a quorum
//     with it, and the near ones are within 2 × the least distance + 10 ms
//     of it (a site's 0.1 ms against another's 50 ms; on one host every
//     voter is near). Unknown round trips make every voter near.
//   - spread: a node leading more than its share of the shards (⌈S ÷
//     live nodes⌉) hands one to the near voter of it that leads fewest,
//     and only if that one leads at least two fewer than this node.
//
// One transfer per node at a time (raft's leadership transfer: the target
// is caught up first). Handing to any voter let two nodes over their
// share pass one shard between them for minutes (800 elections in a
// 5-minute run); with the two-fewer rule a spread lowers the sum of
// squares of the counts, so none is ever undone while the nodes' views
// agree, and a spread never leaves the near voters, so it never undoes a
// move toward a quorum either. A restarted node or a joiner leads nothing
// and takes shards from those over their share: leaders rebalance after
// joins and failovers.
func leadMove(self mesh.NodeID, voters []mesh.NodeID, leads map[mesh.NodeID]int, led, share int, rtt func(a, b mesh.NodeID) (time.Duration, bool)) (to mesh.NodeID, why string) {
	near := nearQuorum(voters, rtt)
	if !slices.Contains(near, self) {
		return fewest(near, leads), "near a quorum"
	}
	if led > share {
		if to := leadTarget(self, near, leads, led); to != "" {
			return to, "spread"
		}
	}
	return "", ""
}

// nearQuorum is the voters whose commits need no far voter: each voter's
// distance is the round trip to the farthest of the nearest others that
// make a quorum with it, and the near ones are within 2 × the least
// distance + 10 ms. Every voter when a round trip it needs is unknown.
func nearQuorum(voters []mesh.NodeID, rtt func(a, b mesh.NodeID) (time.Duration, bool)) []mesh.NodeID {
	q := len(voters)/2 + 1
	if rtt == nil || len(voters) < 2 {
		return voters
	}
	dist := make([]time.Duration, len(voters))
	for i, v := range voters {
		var ds []time.Duration
		for _, w := range voters {
			if w == v {
				continue
			}
			d, ok := rtt(v, w)
			if !ok {
				return voters
			}
			ds = append(ds, d)
		}
		slices.Sort(ds)
		dist[i] = ds[q-2]
	}
	limit := 2*slices.Min(dist) + nearSlack
	var out []mesh.NodeID
	for i, v := range voters {
		if dist[i] <= limit {
			out = append(out, v)
		}
	}
	return out
}

// nearSlack is how much farther than the nearest a voter may be and
// still count as near a quorum.
const nearSlack = 10 * time.Millisecond

// fewest is the node of ids that leads fewest shards (the first of equals).
func fewest(ids []mesh.NodeID, leads map[mesh.NodeID]int) mesh.NodeID {
	var to mesh.NodeID
	for _, id := range ids {
		if to == "" || leads[id] < leads[to] {
			to = id
		}
	}
	return to
}

// leads counts the shards each node leads as this node knows it: its own
// replicas' leaders and, for the shards it does not host, its peers' word.
func (m *Manager) leads() map[mesh.NodeID]int {
	own, _ := m.Status()
	out := map[mesh.NodeID]int{}
	for _, sh := range m.d.PeerShards(own) {
		if sh.Leader != "" {
			out[mesh.NodeID(sh.Leader)]++
		}
	}
	return out
}

// handLeadOver starts a transfer of rep's leadership, which this node
// holds with led-1 others, to the voter leadMove picks, if rep's voters
// are want and no transfer from this node runs; it reports whether it
// started one. The count of the voter chosen is raised in leads.
func (m *Manager) handLeadOver(rep Replica, want []mesh.NodeID, leads map[mesh.NodeID]int, led, share int) bool {
	c, err := rep.Configuration()
	if err != nil || len(want) < 2 || !configIs(c, want) {
		return false
	}
	to, why := leadMove(m.d.ID, want, leads, led, share, m.d.RTT)
	if to == "" {
		return false
	}
	if !m.transferring.CompareAndSwap(false, true) {
		return false
	}
	leads[to]++
	shard := rep.Status().Shard
	go func() {
		defer m.transferring.Store(false)
		if err := rep.TransferLeadership(to); err != nil {
			m.d.Logger.Debug("hand leadership over", "shard", shard, "to", string(to), "why", why, "err", err)
			return
		}
		m.d.Logger.Info("handed leadership over", "shard", shard, "to", string(to), "why", why)
	}()
	return true
}

// leadTarget is the voter in want other than self that leads fewest
// shards (the first of equals), if it leads at least two fewer than led;
// else "".
func leadTarget(self mesh.NodeID, want []mesh.NodeID, leads map[mesh.NodeID]int, led int) mesh.NodeID {
	to := fewest(slices.DeleteFunc(slices.Clone(want), func(id mesh.NodeID) bool { return id == self }), leads)
	if to == "" || leads[to] > led-2 {
		return ""
	}
	return to
}

// configIs reports whether c's voters are exactly want, with no
// non-voters: nothing for reconcile to do (sync then spawns no
// reconcile goroutine: at 64 shards led that was 200 a second).
func configIs(c shardapi.Configuration, want []mesh.NodeID) bool {
	if len(c.Nonvoters) > 0 || len(c.Voters) != len(want) {
		return false
	}
	for _, id := range want {
		if !c.Has(id) {
			return false
		}
	}
	return true
}

// reconcile moves the shard's Raft configuration one step toward want in
// the background: Replica.Reconcile adds and catches up a new replica
// before it removes an old one, and can block for the catch-up, which must
// not stall the other shards' upkeep in sync. One step runs per shard at a
// time; a step toward a placement that has since changed is cancelled (the
// next sync round starts one toward the new placement). Without that, a
// step begun on a passing view of membership — a healed partition
// re-merges one node before another, so placement names a replica it drops
// a moment later — waited out reconcileTimeout for a replica whose node no
// longer runs it, and the shard stayed short of voters for a minute (the
// fault suite's leader + follower partition, docs/reliability.md).
func (m *Manager) reconcile(ctx context.Context, id uint32, rep Replica, want []mesh.NodeID) {
	m.mu.Lock()
	if run := m.reconciling[id]; run != nil {
		if !sameNodes(run.want, want) && run.ctx.Err() == nil {
			m.d.Logger.Info("placement changed; cancelling the reconcile step toward the old one", "shard", id, "was", run.want, "now", want)
			run.cancel()
		}
		m.mu.Unlock()
		return
	}
	m.mu.Unlock()
	if c, err := rep.Configuration(); err == nil && configIs(c, want) {
		return // nothing to do: no goroutine per shard per round
	}
	m.mu.Lock()
	if m.reconciling[id] != nil { // sync is the only caller; kept safe anyway
		m.mu.Unlock()
		return
	}
	rctx, cancel := context.WithTimeout(ctx, reconcileTimeout)
	run := &reconcileStep{want: slices.Clone(want), ctx: rctx, cancel: cancel, done: make(chan struct{})}
	m.reconciling[id] = run
	m.mu.Unlock()
	go func() {
		defer func() {
			cancel()
			m.mu.Lock()
			if m.reconciling[id] == run {
				delete(m.reconciling, id)
			}
			m.mu.Unlock()
			close(run.done)
		}()
		if _, err := rep.Reconcile(rctx, want); err != nil && !errors.Is(err, shardapi.ErrReconfigActive) && !errors.Is(err, shardapi.ErrNotLeader) &&
			!errors.Is(err, context.Canceled) {
			m.d.Logger.Warn("reconcile replicas", "shard", id, "want", want, "err", err)
		}
	}()
}

// reconcileStep is one running Replica.Reconcile: the placement it works
// toward, how to cancel it, and done, closed once it has returned.
type reconcileStep struct {
	want   []mesh.NodeID
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// sameNodes reports whether a and b hold the same nodes, in any order.
func sameNodes(a, b []mesh.NodeID) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(n mesh.NodeID) bool { return !slices.Contains(b, n) })
}

// reconcileTimeout bounds one reconcile step, catch-up of a new replica
// included.
const reconcileTimeout = time.Minute

// removeGoneWorkers removes from the clock table every worker whose node is
// no longer a live member, so it stops holding the others back.
func (m *Manager) removeGoneWorkers(ctx context.Context, rep Replica, live map[mesh.NodeID]bool) {
	for _, w := range rep.Status().Workers {
		if live[mesh.NodeID(w.ID)] {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := rep.RemoveWorker(rctx, w.ID)
		cancel()
		if err != nil {
			m.d.Logger.Warn("remove dead worker", "worker", w.ID, "err", err)
			return
		}
		m.d.Logger.Info("removed dead worker", "shard", rep.Status().Shard, "worker", w.ID)
	}
}

// removed reports whether this node is out of rep's shard: out of rep's
// own configuration, or removed by the leader's word while rep still
// counts it a voter — the leader, as it reports itself to this node's
// mesh view, leads at a term at least rep's with voters that leave this
// node out, in a report heard after the manager first saw rep count this
// node a voter (voterSince). Raft exposes no configuration's log index,
// so the report's age orders it: a report of the voters from before the
// leader promoted this replica once stopped a voter that had just been
// added, and with a kill -9 of another voter of the same shard (four
// voters while placement moved) the shard kept no quorum and the mesh
// stopped training for good (TestLinkHeal). Raft stops replicating to a
// server once the configuration removing it is appended, so a follower
// hears of its own removal only if the leader's last send to it carried
// that entry; one that did not (a bootstrap node handing its shards to
// the placed replicas does so routinely) stays a voter in its own eyes
// and pre-votes every election timeout for as long as it runs, refused
// by every member. A replica that cannot read its configuration is
// presumed in, so it is not stopped early.
func (m *Manager) removed(id uint32, rep Replica, now time.Time) bool {
	c, err := rep.Configuration()
	switch {
	case err != nil:
		return false
	case !c.Has(m.d.ID):
		return true
	case !slices.Contains(c.Voters, m.d.ID) || m.d.PeerLeader == nil:
		return false
	}
	since := m.voterSince(id, rep, now)
	l, ok := m.d.PeerLeader(id)
	heard := now.Add(-time.Duration(l.AgeSeconds * float64(time.Second)))
	return ok && l.Leader != string(m.d.ID) && l.Term >= rep.Status().Term && heard.After(since.Add(voterMargin)) && !slices.Contains(l.Voters, string(m.d.ID))
}

// voterMargin: the leader's word counts against a voter only when heard
// this long after the manager first saw the replica a voter (the
// leader's status is read when asked, and reaches the view within
// milliseconds of that; a second covers the clocks of two goroutines).
const voterMargin = time.Second

// voterSince is when the manager first saw rep, the replica of shard id,
// count this node a voter (now, the first time).
func (m *Manager) voterSince(id uint32, rep Replica, now time.Time) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if v, ok := m.voters[id]; ok && v.rep == rep {
		return v.at
	}
	m.voters[id] = voterMark{rep: rep, at: now}
	return now
}

// dropLocked takes shard id's replica out of the manager's map, and its
// voter mark with it (a mark holds the replica, which holds the shard's
// state, until the next replica replaced it). Called with m.mu held.
func (m *Manager) dropLocked(id uint32) {
	delete(m.replicas, id)
	delete(m.voters, id)
}

// voterMark is when the manager first saw a replica count its node a
// voter.
type voterMark struct {
	rep Replica
	at  time.Time
}

func (m *Manager) stopReplica(id uint32) {
	m.mu.Lock()
	rep := m.replicas[id]
	m.dropLocked(id)
	m.mu.Unlock()
	if rep != nil {
		m.d.Logger.Info("replica no longer placed here; stopped", "shard", id)
		rep.Shutdown()
	}
}

// HandOff transfers leadership of the shards this node leads, so a
// graceful leave does not wait out an election timeout.
func (m *Manager) HandOff() {
	for _, rep := range m.all() {
		if rep.IsLeader() {
			if err := rep.TransferLeadership(""); err != nil {
				m.d.Logger.Debug("hand off", "err", err)
			}
		}
	}
}

func (m *Manager) all() []Replica {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Replica, 0, len(m.replicas))
	for _, r := range m.replicas {
		out = append(out, r)
	}
	return out
}

func (m *Manager) Shutdown() {
	m.mu.Lock()
	reps := m.replicas
	m.replicas = map[uint32]Replica{}
	m.mu.Unlock()
	var errs []error
	for _, r := range reps {
		errs = append(errs, r.Shutdown())
	}
	if err := errors.Join(errs...); err != nil {
		m.d.Logger.Debug("replica shutdown", "err", err)
	}
}

// Status describes every shard from this node's view.
func (m *Manager) Status() ([]records.ShardStatus, []records.WorkerStatus) {
	var out []records.ShardStatus
	var workers []records.WorkerStatus
	// One placement for all shards: asking per shard copied and sorted the
	// member list S times (a sixth of an idle node's CPU at 32 nodes × 64
	// shards, where peers ask for this view 8 times a second).
	places := m.places.get(mesh.PlacedIDs(m.d.Members.Members()))
	for s := range m.bounds {
		id := uint32(s)
		st := records.ShardStatus{ID: id}
		for _, p := range places[id] {
			st.Placement = append(st.Placement, string(p))
		}
		m.mu.Lock()
		st.Refused, st.Diverged = m.refused[id], m.diverged[id]
		m.mu.Unlock()
		if rep := m.local(id); rep != nil {
			rs := rep.Status()
			st.Leader, st.Term, st.Applied, st.Pushes, st.Evaluator = string(rs.Leader), rs.Term, rs.AppliedIndex, rs.Pushes, rs.Evaluator
			st.Local = map[string]string{"Leader": "leader", "Follower": "follower", "Candidate": "candidate"}[rs.State]
			if c, err := rep.Configuration(); err == nil {
				for _, v := range c.Voters {
					st.Voters = append(st.Voters, string(v))
				}
			}
			if st.Local == "leader" && workers == nil {
				workers = workerStatuses(rs.Workers)
			}
		}
		out = append(out, st)
	}
	return out, workers
}

// Evaluator is the worker the evaluation lease names by this node's
// replica of shard 0, "" without one or while it is diverged (it applies
// nothing more, so its lease is not the shard's).
func (m *Manager) Evaluator() string {
	if rep := m.local(0); rep != nil && !m.wasDiverged(0) {
		return rep.Status().Evaluator
	}
	return ""
}

// Refusals sums, per worker, the gradients refused by the shard leaders on
// this node (each leader counts its own; a new leader starts at zero).
func (m *Manager) Refusals() []records.RefusalStatus {
	byWorker := map[string]*records.RefusalStatus{}
	for s := range m.bounds {
		rep := m.local(uint32(s))
		if rep == nil {
			continue
		}
		for w, r := range rep.Status().Service.Refused {
			out := byWorker[string(w)]
			if out == nil {
				out = &records.RefusalStatus{Worker: string(w)}
				byWorker[string(w)] = out
			}
			out.NonFinite += r.NonFinite
			out.Outliers += r.Outliers
			out.Streak = max(out.Streak, r.Streak)
			out.RepeatOffender = out.Streak >= shardapi.RepeatOffender
		}
	}
	out := make([]records.RefusalStatus, 0, len(byWorker))
	for _, r := range byWorker {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b records.RefusalStatus) int { return strings.Compare(a.Worker, b.Worker) })
	return out
}

func workerStatuses(ws []clock.WorkerInfo) []records.WorkerStatus {
	out := make([]records.WorkerStatus, 0, len(ws))
	for _, w := range ws {
		out = append(out, records.WorkerStatus{ID: string(w.ID), Clock: w.Clock, Gap: w.Gap, Grant: w.Grant, Waiting: w.Waiting})
	}
	return out
}

// DataPath sums, over the replicas on this node, the push entry bytes
// proposed times the followers they go to, and the Raft log writes.
func (m *Manager) DataPath() (replicated, logWrites uint64) {
	if m == nil {
		return 0, 0 // a worker tested without shards
	}
	for s := range m.bounds {
		rep := m.local(uint32(s))
		if rep == nil {
			continue
		}
		st := rep.Status()
		logWrites += st.LogWrites
		if st.Service.EntryBytes == 0 {
			continue
		}
		if c, err := rep.Configuration(); err == nil && len(c.Voters) > 1 {
			replicated += st.Service.EntryBytes * uint64(len(c.Voters)-1)
		}
	}
	return replicated, logWrites
}

// SeqBound bounds the Seq of an honest evaluation (the sum of every
// shard's sample count) from the replicas this node hosts: the shard count
// times twice the largest sample count among them plus slack pushes of
// the job's largest, so a replica a little behind its leader, and shards
// whose counts differ by refused pushes, stay inside. ok is false while
// this node hosts no initialised replica.
func (m *Manager) SeqBound(slack int64) (bound uint64, ok bool) {
	var most, perPush int64
	for _, rep := range m.all() {
		rs := rep.Status()
		if !rs.Initialized {
			continue
		}
		ok = true
		most, perPush = max(most, rs.Samples), max(perPush, rs.Spec.MaxPushSamples())
	}
	if !ok {
		return 0, false
	}
	per := uint64(max(most, 0))*2 + uint64(perPush)*uint64(slack)
	return per * uint64(len(m.bounds)), true
}

// Identities is the union of the identity state of the replicas this node
// hosts. A legacy id pinned to different keys by different shards (two
// parties held certificates for it before either pin landed) is in
// Conflicts, with none of its keys in Pins.
func (m *Manager) Identities() (ids shardapi.Identities, conflicts []mesh.NodeID) {
	revoked := map[mesh.NodeID]bool{}
	pins := map[mesh.NodeID]ed25519.PublicKey{}
	bad := map[mesh.NodeID]bool{}
	for _, r := range m.all() {
		got := r.Identities()
		for _, id := range got.Revoked {
			revoked[id] = true
		}
		for id, k := range got.Pins {
			if old, ok := pins[id]; ok && !old.Equal(k) {
				bad[id] = true
			}
			pins[id] = k
		}
	}
	for id := range bad {
		delete(pins, id)
	}
	ids.Revoked = slices.Sorted(maps.Keys(revoked))
	if len(pins) > 0 {
		ids.Pins = pins
	}
	return ids, slices.Sorted(maps.Keys(bad))
}

// PinLeading proposes key as legacy id's pin on every shard this node
// leads; it returns the first error other than a lost leadership.
func (m *Manager) PinLeading(ctx context.Context, id mesh.NodeID, key ed25519.PublicKey) error {
	var first error
	for _, r := range m.all() {
		if !r.IsLeader() {
			continue
		}
		if err := r.Pin(ctx, id, key); err != nil && !errors.Is(err, shardapi.ErrNotLeader) && first == nil {
			first = err
		}
	}
	return first
}

// Shards is the job's shard count.
func (m *Manager) Shards() int { return len(m.bounds) }
