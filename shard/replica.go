package shard

import (
	"context"
	"dsspmesh/shardapi"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/hashicorp/raft"

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

// Replica is this node's member of one shard's raft group and, while it
// leads, the shard's push service.
type Replica struct {
	*member // raft, the FSM and the methods the leader's stages share
	ln      mesh.Listener
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	logs    *countingLog

	// The leader's stages, from a push's receipt to its reply.
	in  *intake
	pr  *proposer
	rp  *replier
	sus *suspector
	chk *checker
	cnt serviceCounters

	reconfig sync.Mutex
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
	fsm.hashEvery, fsm.chk.self, fsm.chk.every = d.HashEvery, cfg.ID, cfg.CheckEvery
	ln, err := d.Transport.Listen(mesh.Channel{Kind: mesh.KindRPC, Shard: cfg.Shard})
	if err != nil {
		return nil, fmt.Errorf("shard %d: listen: %w", cfg.Shard, err)
	}
	rep := &Replica{}
	rep.chk = newChecker(nil, &rep.reconfig)
	fsm.chk.onDiverge = rep.chk.diverged
	d.Stores.SetDamaged(fsm.Damaged)
	budget := newLogBudget(cfg)
	budget.state = fsm.stateBytes
	logs := &countingLog{LogStore: measuredLog{d.Stores.Log, budget}}
	r, err := raft.NewRaft(rc, fsm, logs, d.Stores.Stable, d.Stores.Snapshots, d.RaftTransport)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("shard %d: start raft: %w", cfg.Shard, err)
	}
	budget.attach(r)
	fsm.mu.Lock()
	fsm.raftApplied = r.AppliedIndex
	fsm.mu.Unlock()
	if g, ok := d.RaftTransport.(interface{ GuardHeartbeats(raftstore.TermState) }); ok {
		g.GuardHeartbeats(r) // heartbeats that could change r's term or role take raft's main loop
	}
	ctx, cancel := context.WithCancel(context.Background())
	rep.ln, rep.cancel, rep.logs, rep.refused = ln, cancel, logs, pace.Pacer[mesh.NodeID]{Every: refusalLogEvery}
	rep.member = &member{cfg: cfg, deps: d, log: logger, fsm: fsm, raft: r, ctx: ctx, wg: &rep.wg}
	rep.chk.m = rep.member
	rep.lead.changed = make(chan struct{})
	if g, ok := d.RaftTransport.(interface{ SetAllow(func(mesh.NodeID) bool) }); ok {
		g.SetAllow(rep.allowRaftPeer)
	}
	rep.watchLeadership()
	rep.rp = newReplier(rep.member, &rep.cnt)
	rep.pr = newProposer(rep.member, &rep.cnt, rep.rp)
	rep.in = newIntake(rep.member, &rep.cnt, rep.pr, rep.rp, ln)
	rep.sus = &suspector{m: rep.member, in: rep.in}
	for _, f := range []func(){rep.in.acceptLoop, rep.pr.run, rep.pr.complete, rep.rp.evaluate, rep.sus.run, rep.chk.run} {
		rep.wg.Add(1)
		go func() { defer rep.wg.Done(); f() }()
	}
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

// FSM exposes the state machine for reads (Status, StateHash, Params).
func (r *Replica) FSM() *FSM { return r.fsm }

// Status returns the replica's view for metrics and /status.
func (r *Replica) Status() shardapi.ReplicaStatus {
	_, leader := r.raft.LeaderWithID()
	chk := r.fsm.check()
	return shardapi.ReplicaStatus{
		Status: r.fsm.Status(), ID: r.cfg.ID, State: r.raft.State().String(), Term: r.raft.CurrentTerm(),
		Leader: mesh.NodeID(leader), Held: r.rp.heldCount(), Service: r.cnt.stats(r.in.hyg.stats()), LastIndex: r.raft.LastIndex(),
		LogWrites: r.logs.writes.Load(), Diverged: chk.diverged, Evicted: r.chk.evicted.Load(), Checks: chk.status,
		CommitIndex: r.raft.CommitIndex(), Restored: r.fsm.restores(),
	}
}

// Shutdown stops the service and raft, then closes the raft transport and
// the stores. Idempotent.
func (r *Replica) Shutdown() error {
	r.closeOnce.Do(func() {
		r.cancel()
		r.ln.Close()
		r.in.stop()
		r.rp.stop()
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
