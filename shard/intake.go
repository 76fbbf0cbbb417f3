package shard

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/vmihailenco/msgpack/v5"

	"dsspmesh/clock"
	"dsspmesh/internal/boundedmsgpack"
	"dsspmesh/internal/faults"
	"dsspmesh/mesh"
	"dsspmesh/shardapi"
)

// intake is the leader's first stage (docs/design.md, "The leader by
// stage"): serve reads a stream's requests, check a push before the
// proposer queues it; membership, reads and status probes answer here.
type intake struct {
	m   *member
	cnt *serviceCounters
	pr  *proposer
	rp  *replier
	ln  mesh.Listener
	hyg *hygiene

	mu      sync.Mutex
	stopped bool
	conns   map[*workerConn]struct{}
}

func newIntake(m *member, cnt *serviceCounters, pr *proposer, rp *replier, ln mesh.Listener) *intake {
	return &intake{m: m, cnt: cnt, pr: pr, rp: rp, ln: ln, hyg: newHygiene(), conns: map[*workerConn]struct{}{}}
}

// stop closes every worker stream; goroutines end on the replica's context.
func (in *intake) stop() {
	in.mu.Lock()
	in.stopped = true
	conns := in.conns
	in.conns = map[*workerConn]struct{}{}
	in.mu.Unlock()
	for c := range conns {
		c.close()
	}
}

// connected reports whether a worker stream from id is open here.
func (in *intake) connected(id mesh.NodeID) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	for c := range in.conns {
		if c.s.Peer() == id {
			return true
		}
	}
	return false
}

func (in *intake) acceptLoop() {
	for {
		st, err := in.ln.Accept(in.m.ctx)
		if err != nil {
			return
		}
		c := &workerConn{s: st, timeout: in.m.cfg.ReplyWriteTimeout, cut: &in.cnt.writeTimeouts}
		in.mu.Lock()
		if in.stopped {
			in.mu.Unlock()
			st.Close()
			return
		}
		in.conns[c] = struct{}{}
		in.m.wg.Add(1)
		in.mu.Unlock()
		in.cnt.accepted.Add(1)
		go func() { defer in.m.wg.Done(); in.serve(c) }()
	}
}

// serve reads requests from one worker stream until it breaks.
func (in *intake) serve(c *workerConn) {
	defer func() {
		c.close() // a reply still being written to it is cut
		in.mu.Lock()
		delete(in.conns, c)
		in.mu.Unlock()
		in.rp.forget(c)
	}()
	for {
		// A push carries exactly the shard's gradient (a revocation its
		// MAC, at most maxMAC bytes): a larger payload is refused before it
		// is read. Silence longer than the idle timeout ends the stream
		// (keepAlive extends it while a push is held).
		if spec := in.m.fsm.pushLimits(); spec.Len > 0 {
			c.s.SetMaxPayload(max(spec.Precision.Bytes(spec.Len), maxMAC, shardapi.MaxClaimBytes))
		}
		c.s.SetReadDeadline(time.Now().Add(in.m.cfg.IdleStreamTimeout))
		var req shardapi.Request
		payload, err := c.s.RecvFrame(&req)
		if err != nil {
			if in.m.ctx.Err() == nil && !errors.Is(err, mesh.ErrClosed) {
				in.cnt.recvErrors.Add(1)
				in.m.log.Debug("worker stream closed", "peer", c.s.Peer(), "err", err)
			}
			return
		}
		in.cnt.requests.Add(1)
		// Every peer acts only as itself: a worker's requests name the
		// node its TLS certificate authenticates, so no key holder can
		// push, join or leave under another id.
		if (req.Op == shardapi.OpPush || req.Op == shardapi.OpAddWorker || req.Op == shardapi.OpRemoveWorker || req.Op == shardapi.OpClaim) && req.Worker != clock.WorkerID(c.s.Peer()) {
			in.rp.reject(c, req.Op, req.PushID, shardapi.ReasonNotPeer, fmt.Sprintf("request names worker %q but the stream is authenticated as %q", req.Worker, c.s.Peer()))
			continue
		}
		switch req.Op {
		case shardapi.OpPush:
			in.check(&ticket{Push: Push{PushMeta: req.PushMeta, RecvNanos: in.m.deps.Clock.Now().UnixNano(), Grad: payload},
				to: replyTo{c: c, PushID: req.PushID, keep: req.Keep}})
		case shardapi.OpAddWorker, shardapi.OpRemoveWorker, shardapi.OpRevoke:
			in.m.wg.Add(1)
			go func() { defer in.m.wg.Done(); in.membership(c, req, payload) }()
		case shardapi.OpRead:
			in.m.wg.Add(1)
			go func() { defer in.m.wg.Done(); in.read(c, req) }()
		case shardapi.OpStatus:
			in.status(c, req)
		case shardapi.OpDigest, shardapi.OpEvicted:
			in.agreement(c, req)
		case shardapi.OpClaim, shardapi.OpClaims:
			in.m.wg.Add(1)
			go func() { defer in.m.wg.Done(); in.claim(c, req, payload) }()
		default:
			in.rp.reject(c, req.Op, req.PushID, shardapi.ReasonBadRequest, "unknown op")
		}
	}
}

// check refuses a push the leader must not propose, answers one applied
// already from the state, and queues the rest for the proposer.
func (in *intake) check(t *ticket) {
	c, id := t.to.c, t.to.PushID
	if in.m.raft.State() != raft.Leader {
		in.rp.notLeader(c, shardapi.OpPush, id)
		return
	}
	spec := in.m.fsm.pushLimits()
	prec := spec.Precision
	if reason, detail := checkPush(t.PushMeta, len(t.Grad), spec.Len, spec); reason != 0 {
		in.rp.reject(c, shardapi.OpPush, id, reason, detail)
		return
	}
	if in.m.fsm.IsRevoked(mesh.NodeID(t.Worker)) {
		in.rp.reject(c, shardapi.OpPush, id, shardapi.ReasonNotPeer, fmt.Sprintf("node %q is revoked", t.Worker))
		return
	}
	var floor func() float64
	if spec.Outer.On() {
		floor = func() (norm float64) {
			in.m.fsm.read(func(st *state) { norm = st.params.norm() })
			return roundFloor * norm
		}
	}
	if reason, detail := in.hyg.check(t.Worker, spec, t.Grad, t.Samples, floor); reason != 0 && !faults.On(faults.SkipNonFinite) {
		in.rp.reject(c, shardapi.OpPush, id, reason, detail)
		return
	}
	// A resend of a push already applied is answered from the state,
	// without a new entry: applied locally means committed. (The broken
	// skip-dedupe build proposes it again, for the FSM to apply twice.)
	if !faults.On(faults.SkipDedupe) && !in.rp.settle(t, onArrival) {
		return
	}
	if faults.On(faults.AckUncommitted) && t.Samples > 0 && t.Iter%10 == 5 {
		// broken build only: never proposed
		in.rp.send(c, shardapi.Reply{Op: shardapi.OpPush, PushID: id, Status: shardapi.ReplyOK}, prec.Params().Append(nil, in.m.fsm.Params(nil)))
		return
	}
	in.pr.enqueue(t)
}

func (in *intake) membership(c *workerConn, req shardapi.Request, payload []byte) {
	var clk int64
	var err error
	switch req.Op {
	case shardapi.OpAddWorker:
		clk, err = in.m.AddWorker(in.m.ctx, req.Worker, max(req.Iter, 0))
	case shardapi.OpRevoke:
		// Any member may revoke any id, the mesh key being the operator's
		// credential; the log names who asked.
		if err = in.m.Revoke(in.m.ctx, mesh.NodeID(req.Worker), payload); err == nil {
			in.m.log.Warn("node revoked", "revoked", req.Worker, "by", c.s.Peer())
		}
	default:
		err = in.m.RemoveWorker(in.m.ctx, req.Worker)
	}
	var nl *shardapi.NotLeaderError
	var rej *shardapi.RejectError
	switch {
	// Replies echo Iter (an AddWorker's from): the client matches on it.
	case errors.As(err, &nl):
		in.rp.send(c, shardapi.Reply{Op: req.Op, PushID: req.PushID, Status: shardapi.ReplyNotLeader, Leader: string(nl.Leader)}, nil)
	case errors.As(err, &rej):
		in.rp.reject(c, req.Op, req.PushID, rej.Reason, rej.Detail)
	case err != nil:
		in.rp.send(c, shardapi.Reply{Op: req.Op, PushID: req.PushID, Status: shardapi.ReplyError, Detail: err.Error()}, nil)
	default:
		c.send(shardapi.Reply{Op: req.Op, PushID: req.PushID, Status: shardapi.ReplyOK, Clock: clk}, nil)
	}
}

// claim answers OpClaim, recording the requester's evaluation claim, and
// OpClaims, the claims recorded (claims.go). A claim names the stream's
// peer: every member claims only as itself.
func (in *intake) claim(c *workerConn, req shardapi.Request, payload []byte) {
	rep := shardapi.Reply{Op: req.Op, PushID: req.PushID, Status: shardapi.ReplyOK}
	var out []byte
	var err error
	if req.Op == shardapi.OpClaim {
		var cl shardapi.Claim
		if uerr := boundedmsgpack.Unmarshal(payload, &cl); uerr != nil || cl.By != string(c.s.Peer()) || cl.Index != 0 {
			in.rp.reject(c, req.Op, req.PushID, shardapi.ReasonNotPeer, fmt.Sprintf("a claim from %q that is not its own (by %q, index %d) or not one (%v)", c.s.Peer(), cl.By, cl.Index, uerr))
			return
		}
		err = in.m.RecordClaim(in.m.ctx, cl)
	} else {
		var recs []shardapi.Claim
		if recs, err = in.m.Claims(in.m.ctx); err == nil {
			out, err = msgpack.Marshal(recs)
		}
	}
	var nl *shardapi.NotLeaderError
	var rej *shardapi.RejectError
	switch {
	case errors.As(err, &nl):
		rep.Status, rep.Leader = shardapi.ReplyNotLeader, string(nl.Leader)
	case errors.As(err, &rej):
		in.rp.reject(c, req.Op, req.PushID, rej.Reason, rej.Detail)
		return
	case errors.Is(err, shardapi.ErrNotInitialized):
		rep.Status, rep.Reason, rep.Detail = shardapi.ReplyRejected, shardapi.ReasonNotInitialized, err.Error()
	case err != nil:
		rep.Status, rep.Detail = shardapi.ReplyError, err.Error()
	}
	if rep.Status != shardapi.ReplyOK {
		out = nil
	}
	c.send(rep, out)
}

// read answers an opRead on the replica's RPC channel; the barrier
// may take a round trip, so it runs on its own goroutine.
func (in *intake) read(c *workerConn, req shardapi.Request) {
	sl, params, err := in.m.readFP32(in.m.ctx)
	var nl *shardapi.NotLeaderError
	switch {
	case errors.As(err, &nl):
		in.cnt.notLeader.Add(1)
		c.send(shardapi.Reply{Op: req.Op, PushID: req.PushID, Status: shardapi.ReplyNotLeader, Leader: string(nl.Leader)}, nil)
	case errors.Is(err, shardapi.ErrNotInitialized):
		c.send(shardapi.Reply{Op: req.Op, PushID: req.PushID, Status: shardapi.ReplyRejected, Reason: shardapi.ReasonNotInitialized, Detail: err.Error()}, nil)
	case err != nil:
		c.send(shardapi.Reply{Op: req.Op, PushID: req.PushID, Status: shardapi.ReplyError, Detail: err.Error()}, nil)
	default:
		c.send(shardapi.Reply{Op: req.Op, PushID: req.PushID, Status: shardapi.ReplyOK,
			Clock: sl.Min, Max: sl.Max, Index: sl.Index, Samples: sl.Samples}, params)
	}
}

// status answers an OpStatus probe: the applied index, the leader this
// replica knows (itself when it leads) and its term. A worker whose leader
// went silent asks every other replica at once and follows the newest
// term's answer (shardapi/leaderhint.go).
func (in *intake) status(c *workerConn, req shardapi.Request) {
	c.send(shardapi.Reply{Op: req.Op, PushID: req.PushID, Status: shardapi.ReplyOK,
		Index: in.m.fsm.AppliedIndex(), Leader: string(in.m.Leader()), Term: in.m.raft.CurrentTerm()}, nil)
}

// agreement answers the agreement check's requests (checker.go): OpDigest
// with this replica's digest of an index, or its divergence; OpEvicted
// with whether the leader evicted the requester (the replica's applied
// state: committed), unless this replica diverged itself.
func (in *intake) agreement(c *workerConn, req shardapi.Request) {
	rep := shardapi.Reply{Op: req.Op, PushID: req.PushID, Status: shardapi.ReplyOK}
	var payload []byte
	chk := in.m.fsm.check()
	div := chk.diverged
	switch {
	case req.Op == shardapi.OpDigest && div != nil:
		rep.Detail = "diverged: " + div.Reason
	case req.Op == shardapi.OpDigest:
		d, ok := chk.digest(uint64(max(req.Iter, 0)))
		if !ok {
			rep.Status, rep.Detail = shardapi.ReplyError, fmt.Sprintf("no digest of index %d here (applied %d)", req.Iter, in.m.fsm.AppliedIndex())
		}
		payload = d[:]
	case div != nil:
		rep.Status, rep.Detail = shardapi.ReplyError, "this replica diverged itself"
	default:
		at, ok := chk.evicted[c.s.Peer()]
		if !ok {
			rep.Status, rep.Reason, rep.Detail = shardapi.ReplyRejected, shardapi.ReasonBadRequest, fmt.Sprintf("%s is not evicted from shard %d", c.s.Peer(), in.m.cfg.Shard)
		}
		rep.Index = at
	}
	if rep.Status != shardapi.ReplyOK {
		payload = nil
	}
	c.send(rep, payload)
}
