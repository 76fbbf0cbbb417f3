package shard

import (
	"context"
	"crypto/sha256"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"dsspmesh/clock"
	"dsspmesh/mesh"
	"dsspmesh/shardapi"
)

// checker is the agreement check's stage (docs/design.md, "Replicas
// agree"; the machine is agreement.go): while the replica leads, it
// proposes a check of each new digest index with the servers' digests,
// and evicts the servers a check named; on a replica that diverged, it
// waits for its own eviction. It runs on one goroutine of its own.
type checker struct {
	m        *member
	reconfig *sync.Mutex // the replica's: one configuration change at a time
	last     uint64      // the newest index this replica proposed a check of
	evicted  atomic.Bool // this diverged replica was evicted: its node may rebuild it
	div      chan shardapi.Divergence
	// namedSince is when this leader first saw each named server (evict);
	// run's goroutine only.
	namedSince map[mesh.NodeID]time.Time
}

func newChecker(m *member, reconfig *sync.Mutex) *checker {
	return &checker{m: m, reconfig: reconfig, div: make(chan shardapi.Divergence, 1), namedSince: map[mesh.NodeID]time.Time{}}
}

// diverged is the FSM's onDiverge: it hands d to the checker's goroutine
// (it runs under the FSM's lock and must not block).
func (c *checker) diverged(d shardapi.Divergence) {
	select {
	case c.div <- d:
	default:
	}
}

func (c *checker) run() {
	t := time.NewTicker(c.m.cfg.HeldKeepAlive)
	defer t.Stop()
	for {
		select {
		case <-c.m.fsm.chk.ready:
		case <-t.C:
		case d := <-c.div:
			c.stop(d)
			return
		case <-c.m.ctx.Done():
			return
		}
		if !c.m.IsLeader() {
			continue
		}
		c.evict()
		if at := c.m.fsm.check().digests.latest(); at > c.last {
			c.last = at
			if err := c.check(at); err != nil && c.m.ctx.Err() == nil {
				c.m.log.Debug("agreement check", "index", at, "err", err)
			}
		}
	}
}

// check asks every server of the shard for its digest of index at (at
// most Config.CheckWait) and proposes the check entry.
func (c *checker) check(at uint64) error {
	cfg := c.m.raft.GetConfiguration()
	if err := cfg.Error(); err != nil {
		return err
	}
	var servers []string
	voters := 0
	for _, suffrage := range []raft.ServerSuffrage{raft.Voter, raft.Nonvoter} {
		for _, s := range cfg.Configuration().Servers {
			if s.Suffrage == suffrage && len(servers) < maxCheckServers {
				servers = append(servers, string(s.ID))
				if suffrage == raft.Voter {
					voters++
				}
			}
		}
	}
	if voters == 0 {
		return nil
	}
	h := agreeHeader{Op: "check", At: at, Servers: servers, Voters: voters, Digests: make([][]byte, len(servers))}
	ctx, cancel := context.WithTimeout(c.m.ctx, c.m.cfg.CheckWait)
	defer cancel()
	own := make([]bool, len(servers))
	var wg sync.WaitGroup
	for i, id := range servers {
		if mesh.NodeID(id) == c.m.cfg.ID {
			if d, ok := c.m.fsm.check().digest(at); ok {
				h.Digests[i] = d[:]
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.Digests[i], own[i] = c.ask(ctx, mesh.NodeID(id), at)
		}()
	}
	wg.Wait()
	for i, id := range servers {
		if own[i] {
			h.Own = append(h.Own, id)
		}
	}
	b, err := encodeAgree(h)
	if err != nil {
		return err
	}
	a, err := c.m.propose(c.m.ctx, b)
	if err == nil {
		err = a.Err
	}
	return err
}

// ask is server id's digest of index at, or that it said it diverged;
// neither when it did not answer with one before ctx ended.
func (c *checker) ask(ctx context.Context, id mesh.NodeID, at uint64) (digest []byte, own bool) {
	for {
		rep, payload, err := c.m.call(ctx, id, shardapi.Request{Op: shardapi.OpDigest, PushMeta: shardapi.PushMeta{PushID: shardapi.PushID{Worker: "agreement", Iter: int64(at)}}})
		if err == nil && rep.Status == shardapi.ReplyOK {
			if len(payload) == sha256.Size {
				return payload, false
			}
			return nil, rep.Detail != ""
		}
		t := time.NewTimer(c.m.cfg.CheckWait / 16)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, false
		}
	}
}

// evict removes from the raft configuration every server a check named
// (but this one, which stops itself) and records each eviction, so that
// the evicted replica's node rebuilds it (docs/design.md, "Replicas
// agree"). It skips a round while a reconcile step runs. A named server
// is removed once it says it diverged, or after evictGrace × CheckWait
// without saying so (dead, or rebuilt since): one a step behind commits
// the check without having applied it, and removed then it would never
// apply it — no divergence, no stop, its raft campaigning for ever.
func (c *checker) evict() {
	named := c.m.fsm.check().named
	for id := range c.namedSince {
		if _, ok := named[id]; !ok {
			delete(c.namedSince, id)
		}
	}
	if len(named) == 0 || !c.reconfig.TryLock() {
		return
	}
	defer c.reconfig.Unlock()
	cfg := c.m.raft.GetConfiguration()
	if cfg.Error() != nil {
		return
	}
	now := c.m.deps.Clock.Now()
	for _, id := range slices.Sorted(maps.Keys(named)) {
		if id == c.m.cfg.ID {
			continue
		}
		if slices.ContainsFunc(cfg.Configuration().Servers, func(s raft.Server) bool { return mesh.NodeID(s.ID) == id }) {
			since, seen := c.namedSince[id]
			if !seen {
				since = now
				c.namedSince[id] = now
			}
			if now.Sub(since) < evictGrace*c.m.cfg.CheckWait && !c.saysDiverged(id, named[id]) {
				continue // asked again next round
			}
			if err := c.m.raft.RemoveServer(raft.ServerID(id), 0, c.m.cfg.ApplyTimeout).Error(); err != nil {
				c.m.log.Warn("evict a diverged replica", "peer", id, "err", err)
				return
			}
		}
		b, err := encodeAgree(agreeHeader{Op: "evict", At: named[id], ID: string(id)})
		if err == nil {
			err = c.m.proposeChecked(c.m.ctx, b)
		}
		if err != nil {
			c.m.log.Warn("record the eviction of a diverged replica", "peer", id, "err", err)
			return
		}
		c.m.log.Warn("evicted a diverged replica from the shard; its node rebuilds it from its peers", "peer", id, "named_at", named[id])
	}
}

// evictGrace × Config.CheckWait is how long a named server that has not
// said it diverged stays in the configuration.
const evictGrace = 4

// saysDiverged asks server id, briefly, whether it diverged (ask: its
// OpDigest for index at, the one the check named it at, answers so before
// any digest).
func (c *checker) saysDiverged(id mesh.NodeID, at uint64) bool {
	ctx, cancel := context.WithTimeout(c.m.ctx, c.m.cfg.CheckWait/4)
	defer cancel()
	_, diverged := c.ask(ctx, id, at)
	return diverged
}

// stop is a diverged replica's end: it logs one line, stops raft (no
// more votes, no more service), tells the node, and waits until a server
// of its last configuration says the leader evicted it.
func (c *checker) stop(d shardapi.Divergence) {
	var servers []mesh.NodeID
	if f := c.m.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			if mesh.NodeID(s.ID) != c.m.cfg.ID {
				servers = append(servers, mesh.NodeID(s.ID))
			}
		}
	}
	c.m.log.Error("this replica diverged from its shard: it stops voting and serving, and is rebuilt from its peers once the leader evicts it",
		"index", d.At, "reason", d.Reason)
	if err := c.m.raft.Shutdown().Error(); err != nil {
		c.m.log.Debug("stop raft of a diverged replica", "err", err)
	}
	if c.m.deps.OnDiverged != nil {
		c.m.deps.OnDiverged(d)
	}
	// An eviction of this id before this divergence (a replica rebuilt
	// once already) is not this one's.
	prior, hadPrior := c.m.fsm.check().evicted[c.m.cfg.ID]
	for {
		for _, id := range servers {
			ctx, cancel := context.WithTimeout(c.m.ctx, c.m.cfg.ApplyTimeout)
			rep, _, err := c.m.call(ctx, id, shardapi.Request{Op: shardapi.OpEvicted, PushMeta: shardapi.PushMeta{PushID: shardapi.PushID{Worker: clock.WorkerID(c.m.cfg.ID)}}})
			cancel()
			if err == nil && rep.Status == shardapi.ReplyOK && (!hadPrior || rep.Index != prior) {
				c.evicted.Store(true)
				c.m.log.Warn("the leader evicted this diverged replica; its node rebuilds it", "by", id, "named_at", rep.Index)
				if c.m.deps.OnEvicted != nil {
					c.m.deps.OnEvicted()
				}
				return
			}
		}
		t := time.NewTimer(c.m.cfg.HeldKeepAlive)
		select {
		case <-t.C:
		case <-c.m.ctx.Done():
			t.Stop()
			return
		}
	}
}

// call sends req to server id on the shard's RPC channel and returns its
// one reply and payload.
func (m *member) call(ctx context.Context, id mesh.NodeID, req shardapi.Request) (shardapi.Reply, []byte, error) {
	if m.deps.Resolve == nil {
		return shardapi.Reply{}, nil, fmt.Errorf("shard %d: no resolver to reach %s", m.cfg.Shard, id)
	}
	addr, err := m.deps.Resolve(id)
	if err != nil {
		return shardapi.Reply{}, nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, m.cfg.ApplyTimeout)
	defer cancel()
	s, err := m.deps.Transport.Dial(dctx, id, addr, mesh.Channel{Kind: mesh.KindRPC, Shard: m.cfg.Shard})
	if err != nil {
		return shardapi.Reply{}, nil, err
	}
	defer s.Close()
	if err := s.SendFrame(req, nil); err != nil {
		return shardapi.Reply{}, nil, err
	}
	deadline := time.Now().Add(m.cfg.ApplyTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	s.SetReadDeadline(deadline)
	var rep shardapi.Reply
	payload, err := s.RecvFrame(&rep)
	return rep, payload, err
}
