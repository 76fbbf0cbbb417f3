package shard

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"dsspmesh/clock"
	"dsspmesh/mesh"
	"dsspmesh/raftstore"
	"dsspmesh/shardapi"
)

// Deps are a replica's edges to the world.
type Deps struct {
	// Transport carries worker RPCs (the replica listens on
	// Channel{KindRPC, Shard}) and the catch-up probes of Reconcile.
	Transport mesh.Transport
	// Resolve maps node ids to transport addresses (for Reconcile's probes).
	Resolve mesh.Resolver
	// RaftTransport carries raft's RPCs; the replica closes it on Shutdown.
	// On a node: raftstore.NewMeshTransport. In tests:
	// raft.NewInmemTransport. One with a Quiesce method (raftstore's) is
	// quiesced after raft shuts down and before the stores close; one with
	// GuardHeartbeats (raftstore's) is handed the raft it serves, so that
	// only heartbeats that cannot change its term or role skip raft's
	// main loop.
	RaftTransport raft.Transport
	// Stores are the shard's log, stable and snapshot stores; the replica
	// closes them on Shutdown.
	Stores *raftstore.Stores
	Clock  WallClock
	Logger *slog.Logger
	// Observer, if set, sees every applied entry (see NewFSM).
	Observer func(shardapi.Applied)
	// OnLeader, if set, is called each time this replica becomes leader,
	// once per term, with the term it leads. It runs on the replica's
	// leadership watcher, one call at a time, and must not block.
	OnLeader func(term uint64)
	// ApplyTime, if set, is called by the leader's push service with the
	// time each batch of pushes took from raft.Apply to its application
	// (quorum commit and FSM); it must not block.
	ApplyTime func(time.Duration)
	// HashEvery > 0 adds the state hash to the Applied of every entry whose
	// index is a multiple of it, so replicas can be compared after the fact.
	HashEvery uint64
	// OnDiverged, if set, is told once that this replica diverged (the
	// agreement check or a damaged log: it has stopped raft), OnEvicted
	// once the leader has evicted it, so that the node may discard its
	// stores and open it afresh. Neither may block long.
	OnDiverged func(shardapi.Divergence)
	OnEvicted  func()
	// AllowRaftPeer, if set, lets a peer outside the shard's latest Raft
	// configuration open raft streams (the node: a peer placement assigns
	// to the shard, so a replica whose configuration lags still hears a
	// leader it has not learnt of). See Replica.allowRaftPeer.
	AllowRaftPeer func(mesh.NodeID) bool
}

// member is this node's member of the shard's raft group as the replica
// and its leader's stages (intake, proposer, replier, suspector) use it:
// raft, the FSM, the settings, the replica's life (ctx, wg) and its
// leadership. Its exported methods are the Replica's.
type member struct {
	cfg  Config
	deps Deps
	log  *slog.Logger
	fsm  *FSM
	raft *raft.Raft
	ctx  context.Context
	wg   *sync.WaitGroup
	lead leadership
}

// leadership fans raft's state and leader observations out to
// LeaderChanged waiters and Deps.OnLeader.
type leadership struct {
	mu       sync.Mutex
	changed  chan struct{} // closed and replaced at every observation; guarded by mu
	reported uint64        // highest term given to OnLeader; watcher goroutine only
}

// LeaderChanged returns a channel that is closed at the next change of
// this replica's raft state or of the leader it knows. Read the state
// after taking the channel, so a change between the two is not missed:
//
//	for ch := rep.LeaderChanged(); !rep.IsLeader(); ch = rep.LeaderChanged() {
//		<-ch
//	}
func (m *member) LeaderChanged() <-chan struct{} {
	m.lead.mu.Lock()
	defer m.lead.mu.Unlock()
	return m.lead.changed
}

// watchLeadership runs until the replica shuts down. It is started before
// raft can have elected anyone it has not seen: the observer is registered
// first and the state read after, so a replica that led at once (the only
// voter, restarted) is reported too.
func (m *member) watchLeadership() {
	ch := make(chan raft.Observation, 16)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.RaftState, raft.LeaderObservation:
			return true
		}
		return false
	})
	m.raft.RegisterObserver(obs)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer m.raft.DeregisterObserver(obs)
		m.leaderSeen()
		for {
			select {
			case <-ch:
			case <-m.ctx.Done():
				return
			}
			m.leaderSeen()
		}
	}()
}

// leaderSeen reports the term to Deps.OnLeader once if this replica leads,
// then wakes LeaderChanged waiters (so a waiter that sees it lead knows
// the report is made). The term is read after the state and kept only if
// leadership held across the read, so a report never names a term this
// replica did not lead.
func (m *member) leaderSeen() {
	if m.deps.OnLeader != nil {
		t := m.raft.CurrentTerm()
		if m.raft.State() == raft.Leader && m.raft.CurrentTerm() == t && t > m.lead.reported {
			m.lead.reported = t
			m.deps.OnLeader(t)
		}
	}
	m.lead.mu.Lock()
	close(m.lead.changed)
	m.lead.changed = make(chan struct{})
	m.lead.mu.Unlock()
}

// AddWorker adds w at max(t_min, from) (leader only) and returns its
// clock: the iteration of its next push. A present worker below from is
// advanced to from; one at or past it keeps its clock.
func (m *member) AddWorker(ctx context.Context, w clock.WorkerID, from int64) (int64, error) {
	if from < 0 {
		return 0, fmt.Errorf("shard %d: add worker %q from clock %d: negative", m.cfg.Shard, w, from)
	}
	if from > shardapi.MaxIter { // the FSM refuses it too; nothing proposed
		return 0, &shardapi.RejectError{Op: "add-worker", Shard: m.cfg.Shard, Worker: w, Iter: from, Reason: shardapi.ReasonOutOfBounds,
			Detail: fmt.Sprintf("clock %d above the bound %d", from, int64(shardapi.MaxIter))}
	}
	b, err := encodeWorker(entryAddWorker, w, from)
	if err != nil {
		return 0, err
	}
	a, err := m.propose(ctx, b)
	if err != nil {
		return 0, err
	}
	return a.StartClock, a.Err
}

// RemoveWorker removes w (leader only): declared dead or leaving. Its held
// push is answered with a rejection; workers it held back are released.
func (m *member) RemoveWorker(ctx context.Context, w clock.WorkerID) error {
	b, err := encodeWorker(entryRemoveWorker, w, 0)
	if err != nil {
		return err
	}
	return m.proposeChecked(ctx, b)
}

// Revoke revokes node id in this shard (leader only): its worker leaves
// the gate (its held push is answered with a rejection, workers it held
// back are released) and every replica refuses its later pushes and
// add-workers. mac, the operator's authentication of it, is kept with it
// (unchecked here). Idempotent.
func (m *member) Revoke(ctx context.Context, id mesh.NodeID, mac []byte) error {
	return m.proposeIdentity(ctx, identityHeader{Op: "revoke", ID: string(id), MAC: mac})
}

// Pin records key as legacy id's key in this shard (leader only) unless
// one is pinned; a pin of another key is a *shardapi.RejectError.
func (m *member) Pin(ctx context.Context, id mesh.NodeID, key ed25519.PublicKey) error {
	return m.proposeIdentity(ctx, identityHeader{Op: "pin", ID: string(id), Key: key})
}

func (m *member) proposeIdentity(ctx context.Context, h identityHeader) error {
	if err := checkIdentityHeader(h); err != nil {
		return fmt.Errorf("shard %d: %w", m.cfg.Shard, err)
	}
	b, err := encodeIdentity(h)
	if err != nil {
		return err
	}
	return m.proposeChecked(ctx, b)
}

// RecordClaim records evaluation claim c (leader only; claims.go): a
// *shardapi.RejectError when the shard refused it.
func (m *member) RecordClaim(ctx context.Context, c shardapi.Claim) error {
	err := c.Check()
	if err == nil && m.cfg.Shard != 0 {
		err = fmt.Errorf("claims are recorded by shard 0, not %d", m.cfg.Shard)
	}
	if err != nil {
		return &shardapi.RejectError{Op: "claim", Shard: m.cfg.Shard, Worker: clock.WorkerID(c.By), Reason: shardapi.ReasonBadRequest, Detail: err.Error()}
	}
	b, err := encodeClaim(c)
	if err != nil {
		return err
	}
	return m.proposeChecked(ctx, b)
}

// Claims are the evaluation claims the shard recorded, oldest first,
// read after a barrier (leader only).
func (m *member) Claims(ctx context.Context) ([]shardapi.Claim, error) {
	var out []shardapi.Claim
	err := m.read(ctx, func(st *state) { out = st.claims.list() })
	return out, err
}

// Identities is the shard's identity state as this replica applied it.
func (m *member) Identities() shardapi.Identities { return m.fsm.Identities() }

// propose applies b through raft and waits for its Apply. An error other
// than *NotLeaderError before the call reached raft is ambiguous.
func (m *member) propose(ctx context.Context, b []byte) (shardapi.Applied, error) {
	if m.raft.State() != raft.Leader {
		return shardapi.Applied{}, m.notLeader()
	}
	f := m.raft.Apply(b, m.cfg.ApplyTimeout)
	switch err := awaitFuture(ctx, f); {
	case err == nil:
		return f.Response().(shardapi.Applied), nil
	case err == ctx.Err():
		return shardapi.Applied{}, fmt.Errorf("shard %d: apply (outcome unknown): %w", m.cfg.Shard, err)
	case isLeadershipErr(err):
		return shardapi.Applied{}, fmt.Errorf("%w (outcome unknown: %v)", m.notLeader(), err)
	default:
		return shardapi.Applied{}, fmt.Errorf("shard %d: apply: %w", m.cfg.Shard, err)
	}
}

// proposeChecked proposes b (leader only) and returns the error of
// proposing it or, once applied, the FSM's refusal of it (Applied.Err).
func (m *member) proposeChecked(ctx context.Context, b []byte) error {
	a, err := m.propose(ctx, b)
	if err != nil {
		return err
	}
	return a.Err
}

// awaitFuture waits for f's outcome, or for ctx to end (then it returns
// ctx.Err()): raft may never answer an entry committed as it shut down
// (hashicorp/raft#498), and Shutdown must not wait on such a waiter.
func awaitFuture(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func isLeadershipErr(err error) bool {
	return errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) ||
		errors.Is(err, raft.ErrLeadershipTransferInProgress) || errors.Is(err, raft.ErrRaftShutdown)
}

func (m *member) notLeader() *shardapi.NotLeaderError {
	_, id := m.raft.LeaderWithID()
	return &shardapi.NotLeaderError{Shard: m.cfg.Shard, Leader: mesh.NodeID(id)}
}

// IsLeader reports whether this replica leads the shard now.
func (m *member) IsLeader() bool { return m.raft.State() == raft.Leader }

// Leader is the current leader's id as this replica knows it ("" if none).
func (m *member) Leader() mesh.NodeID {
	_, id := m.raft.LeaderWithID()
	return mesh.NodeID(id)
}

// Read returns the shard's state after a barrier (leader only): the
// barrier commits through a quorum, so a deposed leader cannot answer
// with stale parameters, and waits until every earlier entry is applied.
func (m *member) Read(ctx context.Context) (shardapi.Slice, error) {
	var s shardapi.Slice
	err := m.read(ctx, func(st *state) { s = sliceOf(st, m.cfg.ID, append([]float32(nil), st.params.theta...)) })
	return s, err
}

// readFP32 is Read with the parameters in their fp32 encoding, made under
// the FSM's lock straight from θ: a read reply holds one copy of the
// slice, not a copy and its encoding.
func (m *member) readFP32(ctx context.Context) (shardapi.Slice, []byte, error) {
	var s shardapi.Slice
	var b []byte
	err := m.read(ctx, func(st *state) { s, b = sliceOf(st, m.cfg.ID, nil), shardapi.FP32.Append(nil, st.params.theta) })
	return s, b, err
}

// read runs the barrier, then take under the FSM's read lock, once the
// shard is initialized.
func (m *member) read(ctx context.Context, take func(*state)) error {
	if !m.IsLeader() {
		return m.notLeader()
	}
	timeout := m.cfg.ApplyTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	if err := m.raft.Barrier(timeout).Error(); err != nil {
		if isLeadershipErr(err) {
			return m.notLeader()
		}
		return fmt.Errorf("shard %d: read barrier: %w", m.cfg.Shard, err)
	}
	var err error
	m.fsm.read(func(st *state) {
		if !st.job.initialized {
			err = fmt.Errorf("shard %d: %w", m.cfg.Shard, shardapi.ErrNotInitialized)
			return
		}
		take(st)
	})
	return err
}

// sliceOf is the applied state with params as its parameters, read from
// leader.
func sliceOf(st *state, leader mesh.NodeID, params []float32) shardapi.Slice {
	return shardapi.Slice{Shard: st.shard, Leader: leader, Params: params, Min: st.gate.g.Min(), Max: st.gate.g.Max(),
		Index: uint64(st.index), Samples: st.tally.samples}
}

// WallClock is the time source of the receipt times a leader stamps on
// pushes and of the proposer's batch linger.
type WallClock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

// SystemClock reads time.Now and arms time.After.
type SystemClock struct{}

func (SystemClock) Now() time.Time                         { return time.Now() }
func (SystemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
