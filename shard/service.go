package shard

import (
	"dsspmesh/shardapi"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"dsspmesh/clock"
	"dsspmesh/internal/faults"
	"dsspmesh/mesh"
)

// service is a replica's push service. See the package doc for its
// goroutines; it lives as long as the replica.
type service struct {
	r      *Replica
	queue  chan *Push
	slots  chan struct{}
	flight chan flight

	mu      sync.Mutex
	stopped bool
	conns   map[*workerConn]struct{}
	held    map[heldKey]struct{}
	// pending: pushes queued or in an entry in flight, not answered yet;
	// keepAlive sends them Pending frames while this replica leads.
	pending map[heldKey]int
	// suspect.go: when this replica took the lead (zero while it
	// follows) and the workers whose suspension is being proposed.
	leadSince  time.Time
	suspecting map[clock.WorkerID]bool
	// inflight counts the pushes of entries proposed and not completed;
	// one in it may not join a summed group (aggregate.go).
	inflight map[shardapi.PushID]int

	hyg *hygiene
	cnt serviceCounters
}

type serviceCounters struct {
	requests, batches, proposed, rejected, notLeader, held, acked, accepted, recvErrors, entryBytes, summed, regrouped, pendingFrames, writeTimeouts atomic.Uint64
}

type workerConn struct {
	s       mesh.Stream
	timeout time.Duration  // Config.ReplyWriteTimeout
	cut     *atomic.Uint64 // serviceCounters.writeTimeouts
	sendMu  sync.Mutex
}

// send writes one reply frame, waiting at most the conn's timeout plus the
// frame's time at shardapi.MinReplyRate for the worker to take it; a
// failed or timed-out write closes the stream (the worker resends).
func (c *workerConn) send(h shardapi.Reply, payload []byte) {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	c.s.SetWriteDeadline(time.Now().Add(c.timeout + time.Duration(float64(len(payload))/shardapi.MinReplyRate*float64(time.Second))))
	if err := c.s.SendFrame(h, payload); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			c.cut.Add(1)
		}
		c.s.Close()
	}
}

// close ends the stream at once: a send blocked on a worker that does not
// read returns (its deadline moved to now), then the stream closes. A
// stream's Close alone does not unblock a write (quic-go's SendStream.Close
// must not even run beside one).
func (c *workerConn) close() {
	c.s.SetWriteDeadline(time.Now())
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	c.s.Close()
}

type flight struct {
	f     raft.ApplyFuture
	batch []*Push
	start time.Time
}

// heldKey names the reply a push waits for: the stream it came on, the
// push, and whether the reply carries the slice. It keys the pushes the
// gate holds and those queued or in flight.
type heldKey struct {
	c *workerConn
	shardapi.PushID
	keep bool // the worker keeps its slice: the OK carries none (Request.Keep)
}

func newService(r *Replica) *service {
	return &service{
		r:       r,
		queue:   make(chan *Push, 4*r.cfg.MaxBatchPushes),
		slots:   make(chan struct{}, r.cfg.MaxInflightBatches),
		flight:  make(chan flight, r.cfg.MaxInflightBatches),
		conns:   map[*workerConn]struct{}{},
		held:    map[heldKey]struct{}{},
		pending: map[heldKey]int{},
		hyg:     newHygiene(),

		inflight: map[shardapi.PushID]int{},
	}
}

func (s *service) start() {
	for _, f := range []func(){s.acceptLoop, s.proposer, s.completer, s.evaluator, s.suspector} {
		s.r.wg.Add(1)
		go func() { defer s.r.wg.Done(); f() }()
	}
}

// stop closes every worker stream; goroutines end on the replica's context.
func (s *service) stop() {
	s.mu.Lock()
	s.stopped = true
	conns := s.conns
	s.conns, s.held, s.pending = map[*workerConn]struct{}{}, map[heldKey]struct{}{}, map[heldKey]int{}
	s.mu.Unlock()
	for c := range conns {
		c.close()
	}
}

func (s *service) stats() shardapi.ServiceStats {
	c := &s.cnt
	return shardapi.ServiceStats{Requests: c.requests.Load(), Batches: c.batches.Load(), ProposedPushes: c.proposed.Load(),
		Rejected: c.rejected.Load(), NotLeader: c.notLeader.Load(), Held: c.held.Load(), Acked: c.acked.Load(),
		StreamsAccepted: c.accepted.Load(), StreamErrorsRecv: c.recvErrors.Load(), Refused: s.hyg.stats(), EntryBytes: c.entryBytes.Load(), SummedPushes: c.summed.Load(), RegroupedPushes: c.regrouped.Load(), PendingFrames: c.pendingFrames.Load(),
		ReplyWriteTimeouts: c.writeTimeouts.Load()}
}

func (s *service) heldCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
}

func (s *service) acceptLoop() {
	for {
		st, err := s.r.ln.Accept(s.r.ctx)
		if err != nil {
			return
		}
		c := &workerConn{s: st, timeout: s.r.cfg.ReplyWriteTimeout, cut: &s.cnt.writeTimeouts}
		s.mu.Lock()
		if s.stopped {
			s.mu.Unlock()
			st.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.r.wg.Add(1)
		s.mu.Unlock()
		s.cnt.accepted.Add(1)
		go func() { defer s.r.wg.Done(); s.serve(c) }()
	}
}

// serve reads requests from one worker stream until it breaks.
func (s *service) serve(c *workerConn) {
	defer func() {
		c.close() // a reply still being written to it is cut
		s.mu.Lock()
		delete(s.conns, c)
		for k := range s.held {
			if k.c == c {
				delete(s.held, k)
			}
		}
		for k := range s.pending {
			if k.c == c {
				delete(s.pending, k)
			}
		}
		s.mu.Unlock()
	}()
	for {
		// A push carries exactly the shard's gradient (a revocation its
		// MAC, at most maxMAC bytes): a larger payload is refused before it
		// is read. Silence longer than the idle timeout ends the stream
		// (keepAlive extends it while a push is held).
		if spec := s.r.fsm.pushLimits(); spec.Len > 0 {
			c.s.SetMaxPayload(max(spec.Precision.Bytes(spec.Len), maxMAC))
		}
		c.s.SetReadDeadline(time.Now().Add(s.r.cfg.IdleStreamTimeout))
		var req shardapi.Request
		payload, err := c.s.RecvFrame(&req)
		if err != nil {
			if s.r.ctx.Err() == nil && !errors.Is(err, mesh.ErrClosed) {
				s.cnt.recvErrors.Add(1)
				s.r.log.Debug("worker stream closed", "peer", c.s.Peer(), "err", err)
			}
			return
		}
		s.cnt.requests.Add(1)
		// Every peer acts only as itself: a worker's requests name the
		// node its TLS certificate authenticates, so no key holder can
		// push, join or leave under another id.
		if (req.Op == shardapi.OpPush || req.Op == shardapi.OpAddWorker || req.Op == shardapi.OpRemoveWorker) && req.Worker != clock.WorkerID(c.s.Peer()) {
			s.reject(c, req.Op, req.PushID, shardapi.ReasonNotPeer, fmt.Sprintf("request names worker %q but the stream is authenticated as %q", req.Worker, c.s.Peer()))
			continue
		}
		switch req.Op {
		case shardapi.OpPush:
			s.handlePush(c, req, payload)
		case shardapi.OpAddWorker, shardapi.OpRemoveWorker, shardapi.OpRevoke:
			s.r.wg.Add(1)
			go func() { defer s.r.wg.Done(); s.handleMembership(c, req, payload) }()
		case shardapi.OpRead:
			s.r.wg.Add(1)
			go func() { defer s.r.wg.Done(); s.handleRead(c, req) }()
		case shardapi.OpStatus:
			s.sendStatus(c, req)
		default:
			s.reject(c, req.Op, req.PushID, shardapi.ReasonBadRequest, "unknown op")
		}
	}
}

func (s *service) handlePush(c *workerConn, req shardapi.Request, grad []byte) {
	p := &Push{PushMeta: req.PushMeta, RecvNanos: s.r.deps.Clock.Now().UnixNano(), Grad: grad, c: c, keep: req.Keep}
	if s.r.raft.State() != raft.Leader {
		s.sendNotLeader(c, req.Op, req.PushID)
		return
	}
	spec := s.r.fsm.pushLimits()
	prec := spec.Precision
	if reason, detail := checkPush(p.PushMeta, len(grad), spec.Len, spec); reason != 0 {
		s.reject(c, req.Op, req.PushID, reason, detail)
		return
	}
	if s.r.fsm.IsRevoked(mesh.NodeID(req.Worker)) {
		s.reject(c, req.Op, req.PushID, shardapi.ReasonNotPeer, fmt.Sprintf("node %q is revoked", req.Worker))
		return
	}
	var floor func() float64
	if spec.Outer.On() {
		floor = func() (norm float64) {
			s.r.fsm.read(func(st *state) { norm = st.params.norm() })
			return roundFloor * norm
		}
	}
	if reason, detail := s.hyg.check(req.Worker, spec, grad, req.Samples, floor); reason != 0 && !faults.On(faults.SkipNonFinite) {
		s.reject(c, req.Op, req.PushID, reason, detail)
		return
	}
	// A resend of a push already applied is answered from the state,
	// without a new entry: applied locally means committed. (The broken
	// skip-dedupe build proposes it again, for the FSM to apply twice.)
	if !faults.On(faults.SkipDedupe) && !s.settle(p, onArrival) {
		return
	}
	if faults.On(faults.AckUncommitted) && req.Samples > 0 && req.Iter%10 == 5 {
		// broken build only: never proposed
		s.send(c, shardapi.Reply{Op: req.Op, PushID: req.PushID, Status: shardapi.ReplyOK}, prec.Params().Append(nil, s.r.fsm.Params(nil)))
		return
	}
	s.enqueue(p)
}

// enqueue queues p for the proposer, tracked for keepAlive's Pending
// frames until its reply is decided.
func (s *service) enqueue(p *Push) {
	s.track(p, 1)
	select {
	case s.queue <- p:
	case <-s.r.ctx.Done():
	}
}

// track adds d to the pushes p's stream waits on without a decision yet
// (queued or in flight), for keepAlive's Pending frames.
func (s *service) track(p *Push, d int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.stopped {
		s.trackLocked(p, d)
	}
}

func (s *service) trackLocked(p *Push, d int) {
	k := p.key()
	if s.pending[k] += d; s.pending[k] <= 0 {
		delete(s.pending, k)
	}
}

// stage is the point of a push's life at which its reply is decided.
type stage uint8

const (
	onArrival  stage = iota + 1 // received, not proposed
	afterApply                  // its entry committed and applied
	onRelease                   // it was held and the state changed
)

// decide is the one place a leader decides a push's reply from the
// applied state (st and ver from FSM.replyFor) and the stage it is at: the
// reply's Status, and Reason and Detail or the OK's version (Index,
// Clock). It returns propose when the push is not applied yet and should
// be proposed (only on arrival: a push whose entry applied must have
// moved its clock).
func decide(st replyState, ver shardapi.Version, at stage) (rep shardapi.Reply, propose bool) {
	switch st {
	case replyOK:
		return shardapi.Reply{Status: shardapi.ReplyOK, Index: ver.Index, Clock: ver.Min}, false
	case replyHeld:
		return shardapi.Reply{Status: shardapi.ReplyHeld}, false
	case replyUnknown:
		detail := "worker not in the clock table"
		if at == onRelease {
			detail = "worker removed while its push was held"
		}
		return shardapi.Reply{Status: shardapi.ReplyRejected, Reason: shardapi.ReasonUnknownWorker, Detail: detail}, false
	}
	switch at {
	case onArrival:
		return shardapi.Reply{}, true
	case afterApply:
		return shardapi.Reply{Status: shardapi.ReplyError, Detail: "push applied but clock did not advance"}, false
	}
	return shardapi.Reply{Status: shardapi.ReplyError, Detail: "held push no longer applied"}, false
}

// settle answers (or holds) push p from the applied state as decide says
// at stage at, with the parameters unless p.keep; it returns true if the
// push is not applied yet and should be proposed.
func (s *service) settle(p *Push, at stage) bool {
	k := p.key()
	s.mu.Lock()
	st, params, ver := s.r.fsm.replyFor(k.Worker, k.Iter, !k.keep)
	_, already := s.held[k]
	if st == replyHeld && !s.stopped {
		s.held[k] = struct{}{}
	}
	s.mu.Unlock()
	rep, propose := decide(st, ver, at)
	if propose {
		return true
	}
	if rep.Status == shardapi.ReplyHeld && !already {
		s.cnt.held.Add(1)
	}
	s.answer(k, rep, params)
	return false
}

// answer sends a push's decided reply rep to k, with the parameters and
// shard 0's assignments when it is an OK.
func (s *service) answer(k heldKey, rep shardapi.Reply, params []byte) {
	rep.Op, rep.PushID = shardapi.OpPush, k.PushID
	if rep.Status != shardapi.ReplyOK {
		params = nil
	} else {
		s.r.fsm.read(func(st *state) { rep.Assign, rep.Ahead = st.bal.assignments(k.Worker, k.Iter) })
	}
	s.send(k.c, rep, params)
}

// send sends rep with payload on c and counts it.
func (s *service) send(c *workerConn, rep shardapi.Reply, payload []byte) {
	switch rep.Status {
	case shardapi.ReplyOK:
		if rep.Op == shardapi.OpPush {
			s.cnt.acked.Add(1)
		}
	case shardapi.ReplyRejected:
		s.cnt.rejected.Add(1)
	case shardapi.ReplyNotLeader:
		s.cnt.notLeader.Add(1)
	}
	c.send(rep, payload)
}

func (s *service) reject(c *workerConn, op shardapi.Op, id shardapi.PushID, reason shardapi.Reason, detail string) {
	s.send(c, shardapi.Reply{Op: op, PushID: id, Status: shardapi.ReplyRejected, Reason: reason, Detail: detail}, nil)
}

func (s *service) sendNotLeader(c *workerConn, op shardapi.Op, id shardapi.PushID) {
	s.send(c, shardapi.Reply{Op: op, PushID: id, Status: shardapi.ReplyNotLeader, Leader: string(s.r.Leader())}, nil)
}

// sendPush answers a push on c with a reply of status st and detail
// alone (Held, Pending, Error).
func (s *service) sendPush(c *workerConn, id shardapi.PushID, st shardapi.ReplyStatus, detail string) {
	s.send(c, shardapi.Reply{Op: shardapi.OpPush, PushID: id, Status: st, Detail: detail}, nil)
}

// proposer batches queued pushes into entries. It takes an in-flight slot
// before draining the queue, so pushes that arrive while raft is busy
// share the next entry.
func (s *service) proposer() {
	for {
		var first *Push
		select {
		case first = <-s.queue:
		case <-s.r.ctx.Done():
			return
		}
		select {
		case s.slots <- struct{}{}:
		case <-s.r.ctx.Done():
			return
		}
		batch, ok := s.fill(first)
		if !ok {
			return
		}
		batch, data, err := s.group(batch)
		if err != nil {
			<-s.slots
			for _, p := range batch {
				s.track(p, -1)
				s.reject(p.c, shardapi.OpPush, p.PushID, shardapi.ReasonBadRequest, err.Error())
			}
			continue
		}
		s.cnt.batches.Add(1)
		s.cnt.entryBytes.Add(uint64(len(data)))
		s.cnt.proposed.Add(uint64(len(batch)))
		s.flight <- flight{start: time.Now(), f: s.r.raft.Apply(data, s.r.cfg.ApplyTimeout), batch: batch}
	}
}

// fill drains the queue into a batch that starts with first, up to the
// batch limits. Finding the queue empty with fewer pushes than the shard
// has workers, it waits up to BatchLinger for the others. It reports false
// when the replica stops.
func (s *service) fill(first *Push) ([]*Push, bool) {
	batch, bytes := []*Push{first}, len(first.Grad)
	var linger <-chan time.Time
	for len(batch) < s.r.cfg.MaxBatchPushes && bytes < s.r.cfg.MaxBatchBytes {
		select {
		case p := <-s.queue:
			batch, bytes = append(batch, p), bytes+len(p.Grad)
			continue
		default:
		}
		if s.r.cfg.BatchLinger <= 0 || len(batch) >= s.r.fsm.Workers() {
			break
		}
		if linger == nil {
			linger = s.r.deps.Clock.After(s.r.cfg.BatchLinger)
		}
		select {
		case p := <-s.queue:
			batch, bytes = append(batch, p), bytes+len(p.Grad)
		case <-linger:
			return batch, true
		case <-s.r.ctx.Done():
			return batch, false
		}
	}
	return batch, true
}

// completer waits on proposals in order and answers their pushes.
func (s *service) completer() {
	for {
		var fl flight
		select {
		case fl = <-s.flight:
		case <-s.r.ctx.Done():
			return
		}
		err := awaitFuture(s.r.ctx, fl.f)
		if err != nil && err == s.r.ctx.Err() {
			return
		}
		if err == nil && s.r.deps.ApplyTime != nil {
			s.r.deps.ApplyTime(time.Since(fl.start))
		}
		<-s.slots
		s.landed(fl.batch)
		if err != nil {
			// Ambiguous: the entry may still commit. The worker resends.
			for _, p := range fl.batch {
				if isLeadershipErr(err) {
					s.sendNotLeader(p.c, shardapi.OpPush, p.PushID)
				} else {
					s.sendPush(p.c, p.PushID, shardapi.ReplyError, err.Error())
				}
			}
			continue
		}
		a, _ := fl.f.Response().(shardapi.Applied)
		for i, p := range fl.batch {
			if len(a.Pushes) != len(fl.batch) {
				s.sendPush(p.c, p.PushID, shardapi.ReplyError, "entry not applied")
				continue
			}
			var rej *shardapi.RejectError
			if errors.As(a.Pushes[i].Err, &rej) {
				s.reject(p.c, shardapi.OpPush, p.PushID, rej.Reason, rej.Detail)
				continue
			}
			if a.Pushes[i].Err == ErrRegroup {
				s.regroup(p)
				continue
			}
			s.settle(p, afterApply)
		}
	}
}

// evaluator re-examines held replies after every Apply, sends keep-alives
// and hands held workers to the next leader when this replica stops leading.
func (s *service) evaluator() {
	tick := time.NewTicker(s.r.cfg.HeldKeepAlive)
	defer tick.Stop()
	lead := s.r.LeaderChanged()
	for {
		select {
		case <-s.r.fsm.applied():
			s.reevaluate()
		case <-tick.C:
			s.keepAlive()
		case <-lead:
			// Deposed: held workers hear NotLeader now, not at the next tick.
			lead = s.r.LeaderChanged()
			if !s.r.IsLeader() {
				s.keepAlive()
			}
		case <-s.r.ctx.Done():
			return
		}
	}
}

func (s *service) reevaluate() {
	type out struct {
		k      heldKey
		st     replyState
		params []byte
		ver    shardapi.Version
	}
	var outs []out
	s.mu.Lock()
	for k := range s.held {
		st, params, ver := s.r.fsm.replyFor(k.Worker, k.Iter, !k.keep)
		if st != replyHeld {
			delete(s.held, k)
			outs = append(outs, out{k, st, params, ver})
		}
	}
	s.mu.Unlock()
	for _, o := range outs {
		rep, _ := decide(o.st, o.ver, onRelease)
		s.answer(o.k, rep, o.params)
	}
}

func (s *service) keepAlive() {
	leading := s.r.raft.State() == raft.Leader
	s.mu.Lock()
	keys := make([]heldKey, 0, len(s.held))
	for k := range s.held {
		keys = append(keys, k)
		if !leading {
			delete(s.held, k)
		}
	}
	var pend []heldKey
	if leading {
		// Pushes not decided yet: their entry is queued or replicating.
		// A deposed leader sends none; the completer answers them
		// (NotLeader) when their proposals fail.
		pend = make([]heldKey, 0, len(s.pending))
		for k := range s.pending {
			pend = append(pend, k)
		}
	}
	s.mu.Unlock()
	for _, k := range pend {
		k.c.s.SetReadDeadline(time.Now().Add(s.r.cfg.IdleStreamTimeout))
		s.cnt.pendingFrames.Add(1)
		s.sendPush(k.c, k.PushID, shardapi.ReplyPending, "")
	}
	for _, k := range keys {
		if leading {
			k.c.s.SetReadDeadline(time.Now().Add(s.r.cfg.IdleStreamTimeout))
			s.sendPush(k.c, k.PushID, shardapi.ReplyHeld, "")
		} else {
			s.sendNotLeader(k.c, shardapi.OpPush, k.PushID)
		}
	}
}

func (s *service) handleMembership(c *workerConn, req shardapi.Request, payload []byte) {
	var clk int64
	var err error
	switch req.Op {
	case shardapi.OpAddWorker:
		clk, err = s.r.AddWorker(s.r.ctx, req.Worker, max(req.Iter, 0))
	case shardapi.OpRevoke:
		// Any member may revoke any id, the mesh key being the operator's
		// credential; the log names who asked.
		if err = s.r.Revoke(s.r.ctx, mesh.NodeID(req.Worker), payload); err == nil {
			s.r.log.Warn("node revoked", "revoked", req.Worker, "by", c.s.Peer())
		}
	default:
		err = s.r.RemoveWorker(s.r.ctx, req.Worker)
	}
	var nl *shardapi.NotLeaderError
	var rej *shardapi.RejectError
	switch {
	// Replies echo Iter (an AddWorker's from): the client matches on it.
	case errors.As(err, &nl):
		s.send(c, shardapi.Reply{Op: req.Op, PushID: req.PushID, Status: shardapi.ReplyNotLeader, Leader: string(nl.Leader)}, nil)
	case errors.As(err, &rej):
		s.reject(c, req.Op, req.PushID, rej.Reason, rej.Detail)
	case err != nil:
		s.send(c, shardapi.Reply{Op: req.Op, PushID: req.PushID, Status: shardapi.ReplyError, Detail: err.Error()}, nil)
	default:
		c.send(shardapi.Reply{Op: req.Op, PushID: req.PushID, Status: shardapi.ReplyOK, Clock: clk}, nil)
	}
}
