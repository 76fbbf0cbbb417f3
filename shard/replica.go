package shard

import (
	"context"
	"crypto/ed25519"
	"dsspmesh/shardapi"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"dsspmesh/clock"
	"dsspmesh/internal/pace"
	"dsspmesh/mesh"
	"dsspmesh/raftstore"
)

// refusalLogEvery is how often the refusal of one peer's raft streams is
// logged again. A replica removed from the shard that still runs (its node
// cut off when the leader removed it, so it never learnt) pre-votes every
// election timeout for as long as it runs; a warning per attempt buried
// everything else in the log of every replica it asked.
const refusalLogEvery = time.Minute

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
	// AllowRaftPeer, if set, lets a peer outside the shard's latest Raft
	// configuration open raft streams (the node: a peer placement assigns
	// to the shard, so a replica whose configuration lags still hears a
	// leader it has not learnt of). See Replica.allowRaftPeer.
	AllowRaftPeer func(mesh.NodeID) bool
}

// Replica is this node's member of one shard's raft group and, while it
// leads, the shard's push service.
type Replica struct {
	cfg    Config
	deps   Deps
	log    *slog.Logger
	fsm    *FSM
	raft   *raft.Raft
	ln     mesh.Listener
	svc    *service
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	logs   *countingLog

	reconfig sync.Mutex
	lead     leadership
	refused  pace.Pacer[mesh.NodeID] // paces allowRaftPeer's warning per peer (refusalLogEvery)

	closeOnce sync.Once
	closeErr  error
}

// NewReplica starts the replica: raft (recovering from Stores if they hold
// state) and the push service. A fresh shard then needs Bootstrap on one
// node (or to be added as a voter by the leader) and Init.
func NewReplica(cfg Config, d Deps) (*Replica, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Transport == nil || d.RaftTransport == nil || d.Stores == nil || d.Logger == nil {
		return nil, errors.New("shard: NewReplica needs Transport, RaftTransport, Stores and Logger")
	}
	if d.Clock == nil {
		d.Clock = SystemClock{}
	}
	logger := d.Logger.With("shard", cfg.Shard)
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.CommitTimeout
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.TrailingLogs = cfg.TrailingLogs
	rc.MaxAppendEntries = cfg.MaxAppendEntries
	rc.Logger = raftstore.HCLogger(logger, "raft")
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, fmt.Errorf("shard %d: raft config: %w", cfg.Shard, err)
	}
	fsm := NewFSM(cfg.Shard, d.Observer)
	fsm.hashEvery = d.HashEvery
	ln, err := d.Transport.Listen(mesh.Channel{Kind: mesh.KindRPC, Shard: cfg.Shard})
	if err != nil {
		return nil, fmt.Errorf("shard %d: listen: %w", cfg.Shard, err)
	}
	budget := newLogBudget(cfg)
	budget.state = fsm.stateBytes
	logs := &countingLog{LogStore: measuredLog{d.Stores.Log, budget}}
	r, err := raft.NewRaft(rc, fsm, logs, d.Stores.Stable, d.Stores.Snapshots, d.RaftTransport)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("shard %d: start raft: %w", cfg.Shard, err)
	}
	budget.attach(r)
	if g, ok := d.RaftTransport.(interface{ GuardHeartbeats(raftstore.TermState) }); ok {
		g.GuardHeartbeats(r) // heartbeats that could change r's term or role take raft's main loop
	}
	ctx, cancel := context.WithCancel(context.Background())
	rep := &Replica{cfg: cfg, deps: d, log: logger, fsm: fsm, raft: r, ln: ln, ctx: ctx, cancel: cancel, logs: logs,
		refused: pace.Pacer[mesh.NodeID]{Every: refusalLogEvery}}
	rep.lead.changed = make(chan struct{})
	if g, ok := d.RaftTransport.(interface{ SetAllow(func(mesh.NodeID) bool) }); ok {
		g.SetAllow(rep.allowRaftPeer)
	}
	rep.watchLeadership()
	rep.svc = newService(rep)
	rep.svc.start()
	return rep, nil
}

// allowRaftPeer is the rule for who may open raft streams to this
// replica: a member of the latest configuration it knows (committed or
// not), or anyone while it knows none (a replica never bootstrapped waits
// for the leader that adds it), or a peer Deps.AllowRaftPeer vouches for.
// Everyone else — a node removed from the shard, a stray key holder — is
// refused, so it can neither disrupt elections nor append entries; the
// refusal is logged once per peer a minute (refusalLogEvery).
func (r *Replica) allowRaftPeer(peer mesh.NodeID) bool {
	f := r.raft.GetConfiguration()
	if f.Error() != nil {
		return true
	}
	servers := f.Configuration().Servers
	if len(servers) == 0 {
		return true
	}
	for _, s := range servers {
		if mesh.NodeID(s.ID) == peer {
			return true
		}
	}
	if r.deps.AllowRaftPeer != nil && r.deps.AllowRaftPeer(peer) {
		return true
	}
	if log, unlogged, _ := r.refused.Note(peer, r.deps.Clock.Now()); log {
		r.log.Warn("refusing raft stream from a peer outside the shard's configuration and placement",
			"peer", string(peer), "refused_unlogged", unlogged, "logged_every", refusalLogEvery)
	}
	return false
}

// Bootstrap makes voters the shard's first configuration. Call it on one
// node of a shard that has never run; on a shard with state it returns an
// error wrapping raft.ErrCantBootstrap.
func (r *Replica) Bootstrap(voters []mesh.NodeID) error {
	var servers []raft.Server
	for _, id := range voters {
		servers = append(servers, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(id)})
	}
	if err := r.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
		return fmt.Errorf("shard %d: bootstrap: %w", r.cfg.Shard, err)
	}
	return nil
}

// Init proposes the shard's spec and initial parameters (leader only).
func (r *Replica) Init(ctx context.Context, spec shardapi.Spec, theta []float32) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	if spec.Shard != r.cfg.Shard || len(theta) != spec.Len {
		return fmt.Errorf("shard %d: Init for shard %d with %d parameters, spec says %d", r.cfg.Shard, spec.Shard, len(theta), spec.Len)
	}
	b, err := encodeInit(spec, theta)
	if err != nil {
		return err
	}
	return r.proposeChecked(ctx, b)
}

// AddWorker adds w at max(t_min, from) (leader only) and returns its
// clock: the iteration of its next push. A present worker below from is
// advanced to from; one at or past it keeps its clock.
func (r *Replica) AddWorker(ctx context.Context, w clock.WorkerID, from int64) (int64, error) {
	if from < 0 {
		return 0, fmt.Errorf("shard %d: add worker %q from clock %d: negative", r.cfg.Shard, w, from)
	}
	if from > shardapi.MaxIter { // the FSM refuses it too; nothing proposed
		return 0, &shardapi.RejectError{Op: "add-worker", Shard: r.cfg.Shard, Worker: w, Iter: from, Reason: shardapi.ReasonOutOfBounds,
			Detail: fmt.Sprintf("clock %d above the bound %d", from, int64(shardapi.MaxIter))}
	}
	b, err := encodeWorker(entryAddWorker, w, from)
	if err != nil {
		return 0, err
	}
	a, err := r.propose(ctx, b)
	if err != nil {
		return 0, err
	}
	return a.StartClock, a.Err
}

// RemoveWorker removes w (leader only): declared dead or leaving. Its held
// push is answered with a rejection; workers it held back are released.
func (r *Replica) RemoveWorker(ctx context.Context, w clock.WorkerID) error {
	b, err := encodeWorker(entryRemoveWorker, w, 0)
	if err != nil {
		return err
	}
	return r.proposeChecked(ctx, b)
}

// propose applies b through raft and waits for its Apply. An error other
// than *NotLeaderError before the call reached raft is ambiguous.
func (r *Replica) propose(ctx context.Context, b []byte) (shardapi.Applied, error) {
	if r.raft.State() != raft.Leader {
		return shardapi.Applied{}, r.notLeader()
	}
	f := r.raft.Apply(b, r.cfg.ApplyTimeout)
	switch err := awaitFuture(ctx, f); {
	case err == nil:
		return f.Response().(shardapi.Applied), nil
	case err == ctx.Err():
		return shardapi.Applied{}, fmt.Errorf("shard %d: apply (outcome unknown): %w", r.cfg.Shard, err)
	case isLeadershipErr(err):
		return shardapi.Applied{}, fmt.Errorf("%w (outcome unknown: %v)", r.notLeader(), err)
	default:
		return shardapi.Applied{}, fmt.Errorf("shard %d: apply: %w", r.cfg.Shard, err)
	}
}

// proposeChecked proposes b (leader only) and returns the error of
// proposing it or, once applied, the FSM's refusal of it (Applied.Err).
func (r *Replica) proposeChecked(ctx context.Context, b []byte) error {
	a, err := r.propose(ctx, b)
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

func (r *Replica) notLeader() *shardapi.NotLeaderError {
	_, id := r.raft.LeaderWithID()
	return &shardapi.NotLeaderError{Shard: r.cfg.Shard, Leader: mesh.NodeID(id)}
}

// IsLeader reports whether this replica leads the shard now.
func (r *Replica) IsLeader() bool { return r.raft.State() == raft.Leader }

// Leader is the current leader's id as this replica knows it ("" if none).
func (r *Replica) Leader() mesh.NodeID {
	_, id := r.raft.LeaderWithID()
	return mesh.NodeID(id)
}

// FSM exposes the state machine for reads (Status, StateHash, Params).
func (r *Replica) FSM() *FSM { return r.fsm }

// Status returns the replica's view for metrics and /status.
func (r *Replica) Status() shardapi.ReplicaStatus {
	_, leader := r.raft.LeaderWithID()
	return shardapi.ReplicaStatus{
		Status: r.fsm.Status(), ID: r.cfg.ID, State: r.raft.State().String(), Term: r.raft.CurrentTerm(),
		Leader: mesh.NodeID(leader), Held: r.svc.heldCount(), Service: r.svc.stats(), LastIndex: r.raft.LastIndex(),
		LogWrites: r.logs.writes.Load(),
	}
}

// Shutdown stops the service and raft, then closes the raft transport and
// the stores. Idempotent.
func (r *Replica) Shutdown() error {
	r.closeOnce.Do(func() {
		r.cancel()
		r.ln.Close()
		r.svc.stop()
		errs := []error{r.raft.Shutdown().Error()}
		if q, ok := r.deps.RaftTransport.(interface{ Quiesce() }); ok {
			q.Quiesce()
		}
		if c, ok := r.deps.RaftTransport.(io.Closer); ok {
			errs = append(errs, c.Close())
		}
		r.wg.Wait()
		errs = append(errs, r.deps.Stores.Close())
		r.closeErr = errors.Join(errs...)
	})
	return r.closeErr
}

// Revoke revokes node id in this shard (leader only): its worker leaves
// the gate (its held push is answered with a rejection, workers it held
// back are released) and every replica refuses its later pushes and
// add-workers. mac, the operator's authentication of it, is kept with it
// (unchecked here). Idempotent.
func (r *Replica) Revoke(ctx context.Context, id mesh.NodeID, mac []byte) error {
	return r.proposeIdentity(ctx, identityHeader{Op: "revoke", ID: string(id), MAC: mac})
}

// Pin records key as legacy id's key in this shard (leader only) unless
// one is pinned; a pin of another key is a *shardapi.RejectError.
func (r *Replica) Pin(ctx context.Context, id mesh.NodeID, key ed25519.PublicKey) error {
	return r.proposeIdentity(ctx, identityHeader{Op: "pin", ID: string(id), Key: key})
}

func (r *Replica) proposeIdentity(ctx context.Context, h identityHeader) error {
	if err := checkIdentityHeader(h); err != nil {
		return fmt.Errorf("shard %d: %w", r.cfg.Shard, err)
	}
	b, err := encodeIdentity(h)
	if err != nil {
		return err
	}
	return r.proposeChecked(ctx, b)
}

// Identities is the shard's identity state as this replica applied it.
func (r *Replica) Identities() shardapi.Identities { return r.fsm.Identities() }
