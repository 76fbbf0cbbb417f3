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
	queue  chan *pending
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
	requests, batches, proposed, rejected, notLeader, held, acked, accepted, recvErrors, entryBytes, summed, pendingFrames, writeTimeouts atomic.Uint64
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

type pending struct {
	c    *workerConn
	req  shardapi.Request
	grad []byte
	recv int64
}

type flight struct {
	f     raft.ApplyFuture
	batch []*pending
	start time.Time
}

// heldKey is a push whose reply the gate holds, on the stream it came on.
type heldKey struct {
	c *workerConn
	shardapi.PushID
	keep bool // the worker keeps its slice: the OK carries none (Request.Keep)
}

func newService(r *Replica) *service {
	return &service{
		r:       r,
		queue:   make(chan *pending, 4*r.cfg.MaxBatchPushes),
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
		StreamsAccepted: c.accepted.Load(), StreamErrorsRecv: c.recvErrors.Load(), Refused: s.hyg.stats(), EntryBytes: c.entryBytes.Load(), SummedPushes: c.summed.Load(), PendingFrames: c.pendingFrames.Load(),
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
		// A push carries exactly the shard's gradient: a larger payload is
		// refused before it is read. Silence longer than the idle timeout
		// ends the stream (keepAlive extends it while a push is held).
		if n, prec, _ := s.r.fsm.pushLimits(); n > 0 {
			c.s.SetMaxPayload(prec.Bytes(n))
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
			s.reject(c, req, shardapi.ReasonNotPeer, fmt.Sprintf("request names worker %q but the stream is authenticated as %q", req.Worker, c.s.Peer()))
			continue
		}
		switch req.Op {
		case shardapi.OpPush:
			s.handlePush(c, req, payload)
		case shardapi.OpAddWorker, shardapi.OpRemoveWorker:
			s.r.wg.Add(1)
			go func() { defer s.r.wg.Done(); s.handleMembership(c, req) }()
		case shardapi.OpRead:
			s.r.wg.Add(1)
			go func() { defer s.r.wg.Done(); s.handleRead(c, req) }()
		case shardapi.OpStatus:
			s.sendStatus(c, req)
		default:
			s.reject(c, req, shardapi.ReasonBadRequest, "unknown op")
		}
	}
}

func (s *service) handlePush(c *workerConn, req shardapi.Request, grad []byte) {
	recv := s.r.deps.Clock.Now().UnixNano()
	if s.r.raft.State() != raft.Leader {
		s.sendNotLeader(c, req.Op, req.PushID)
		return
	}
	if req.Worker == "" || req.Iter < 0 || req.Samples < 0 || req.ComputeNs < 0 {
		s.reject(c, req, shardapi.ReasonBadRequest, "empty worker or negative field")
		return
	}
	n, prec, factor := s.r.fsm.pushLimits()
	if n > 0 && len(grad) != prec.Bytes(n) {
		s.reject(c, req, shardapi.ReasonBadLength, fmt.Sprintf("%d gradient bytes, the shard has %d parameters in %s", len(grad), n, prec))
		return
	}
	if reason, detail := s.hyg.check(req.Worker, prec, grad, req.Samples, factor); reason != 0 && !faults.On(faults.SkipNonFinite) {
		s.reject(c, req, reason, detail)
		return
	}
	// A resend of a push already applied is answered from the state,
	// without a new entry: applied locally means committed. (The broken
	// skip-dedupe build proposes it again, for the FSM to apply twice.)
	if !faults.On(faults.SkipDedupe) && !s.settle(c, req.PushID, req.Keep, onArrival) {
		return
	}
	if faults.On(faults.AckUncommitted) && req.Samples > 0 && req.Iter%10 == 5 {
		// broken build only: never proposed
		s.send(c, req.Op, req.PushID, verdict{status: shardapi.ReplyOK, params: prec.Params().Append(nil, s.r.fsm.Params(nil))})
		return
	}
	p := &pending{c: c, req: req, grad: grad, recv: recv}
	s.track(p, 1)
	select {
	case s.queue <- p:
	case <-s.r.ctx.Done():
	}
}

// track adds d to the pushes p's stream waits on without a decision yet
// (queued or in flight), for keepAlive's Pending frames.
func (s *service) track(p *pending, d int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.stopped {
		s.trackLocked(p, d)
	}
}

func (s *service) trackLocked(p *pending, d int) {
	k := heldKey{c: p.c, PushID: p.req.PushID, keep: p.req.Keep}
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

// verdict is a push's reply: the status and what goes with it.
type verdict struct {
	status shardapi.ReplyStatus
	reason shardapi.Reason
	detail string
	leader string
	params []byte // an OK's parameter slice (tensor codec)
	assign *shardapi.Assignment
	ahead  *shardapi.Assignment // under Spec.Pipeline: the one after assign
	ver    shardapi.Version     // an OK's: the version of the state it reflects
}

// decide is the one place a leader decides a push's reply from the
// applied state (st, params, ver from FSM.replyFor) and the stage it is at. It
// returns propose when the push is not applied yet and should be proposed
// (only on arrival: a push whose entry applied must have moved its clock).
func decide(st replyState, params []byte, ver shardapi.Version, at stage) (v verdict, propose bool) {
	switch st {
	case replyOK:
		return verdict{status: shardapi.ReplyOK, params: params, ver: ver}, false
	case replyHeld:
		return verdict{status: shardapi.ReplyHeld}, false
	case replyUnknown:
		detail := "worker not in the clock table"
		if at == onRelease {
			detail = "worker removed while its push was held"
		}
		return verdict{status: shardapi.ReplyRejected, reason: shardapi.ReasonUnknownWorker, detail: detail}, false
	}
	switch at {
	case onArrival:
		return verdict{}, true
	case afterApply:
		return verdict{status: shardapi.ReplyError, detail: "push applied but clock did not advance"}, false
	}
	return verdict{status: shardapi.ReplyError, detail: "held push no longer applied"}, false
}

// settle answers (or holds) push id from the applied state as decide says
// at stage at, with the parameters unless keep; it returns true if the push is not applied yet and should
// be proposed.
func (s *service) settle(c *workerConn, id shardapi.PushID, keep bool, at stage) bool {
	s.mu.Lock()
	st, params, ver := s.r.fsm.replyFor(id.Worker, id.Iter, !keep)
	k := heldKey{c: c, PushID: id, keep: keep}
	_, already := s.held[k]
	if st == replyHeld && !s.stopped {
		s.held[k] = struct{}{}
	}
	s.mu.Unlock()
	v, propose := decide(st, params, ver, at)
	if propose {
		return true
	}
	if v.status == shardapi.ReplyOK {
		v.assign, v.ahead = s.r.fsm.assignments(id.Worker, id.Iter)
	}
	if v.status == shardapi.ReplyHeld && !already {
		s.cnt.held.Add(1)
	}
	s.send(c, shardapi.OpPush, id, v)
	return false
}

// send sends the reply v to op id on c and counts it.
func (s *service) send(c *workerConn, op shardapi.Op, id shardapi.PushID, v verdict) {
	switch v.status {
	case shardapi.ReplyOK:
		if op == shardapi.OpPush {
			s.cnt.acked.Add(1)
		}
	case shardapi.ReplyRejected:
		s.cnt.rejected.Add(1)
	case shardapi.ReplyNotLeader:
		s.cnt.notLeader.Add(1)
	}
	c.send(shardapi.Reply{Op: op, PushID: id, Status: v.status, Leader: v.leader, Reason: v.reason, Detail: v.detail, Assign: v.assign, Ahead: v.ahead,
		Index: v.ver.Index, Clock: v.ver.Min}, v.params)
}

func (s *service) reject(c *workerConn, req shardapi.Request, reason shardapi.Reason, detail string) {
	s.send(c, req.Op, req.PushID, verdict{status: shardapi.ReplyRejected, reason: reason, detail: detail})
}

func (s *service) sendNotLeader(c *workerConn, op shardapi.Op, id shardapi.PushID) {
	s.send(c, op, id, verdict{status: shardapi.ReplyNotLeader, leader: string(s.r.Leader())})
}

// proposer batches queued pushes into entries. It takes an in-flight slot
// before draining the queue, so pushes that arrive while raft is busy
// share the next entry.
func (s *service) proposer() {
	for {
		var first *pending
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
				s.reject(p.c, p.req, shardapi.ReasonBadRequest, err.Error())
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
func (s *service) fill(first *pending) ([]*pending, bool) {
	batch, bytes := []*pending{first}, len(first.grad)
	var linger <-chan time.Time
	for len(batch) < s.r.cfg.MaxBatchPushes && bytes < s.r.cfg.MaxBatchBytes {
		select {
		case p := <-s.queue:
			batch, bytes = append(batch, p), bytes+len(p.grad)
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
			batch, bytes = append(batch, p), bytes+len(p.grad)
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
					s.sendNotLeader(p.c, shardapi.OpPush, p.req.PushID)
				} else {
					s.send(p.c, shardapi.OpPush, p.req.PushID, verdict{status: shardapi.ReplyError, detail: err.Error()})
				}
			}
			continue
		}
		a, _ := fl.f.Response().(shardapi.Applied)
		for i, p := range fl.batch {
			if len(a.Pushes) != len(fl.batch) {
				s.send(p.c, shardapi.OpPush, p.req.PushID, verdict{status: shardapi.ReplyError, detail: "entry not applied"})
				continue
			}
			var rej *shardapi.RejectError
			if errors.As(a.Pushes[i].Err, &rej) {
				s.reject(p.c, p.req, rej.Reason, rej.Detail)
				continue
			}
			if regrouped(a.Pushes[i]) {
				s.send(p.c, shardapi.OpPush, p.req.PushID, verdict{status: shardapi.ReplyError, detail: ErrRegroup.Error()})
				continue
			}
			s.settle(p.c, p.req.PushID, p.req.Keep, afterApply)
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
		v, _ := decide(o.st, o.params, o.ver, onRelease)
		if v.status == shardapi.ReplyOK {
			v.assign, v.ahead = s.r.fsm.assignments(o.k.Worker, o.k.Iter)
		}
		s.send(o.k.c, shardapi.OpPush, o.k.PushID, v)
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
		s.send(k.c, shardapi.OpPush, k.PushID, verdict{status: shardapi.ReplyPending})
	}
	for _, k := range keys {
		if leading {
			k.c.s.SetReadDeadline(time.Now().Add(s.r.cfg.IdleStreamTimeout))
			s.send(k.c, shardapi.OpPush, k.PushID, verdict{status: shardapi.ReplyHeld})
		} else {
			s.sendNotLeader(k.c, shardapi.OpPush, k.PushID)
		}
	}
}

func (s *service) handleMembership(c *workerConn, req shardapi.Request) {
	var clk int64
	var err error
	if req.Op == shardapi.OpAddWorker {
		clk, err = s.r.AddWorker(s.r.ctx, req.Worker, max(req.Iter, 0))
	} else {
		err = s.r.RemoveWorker(s.r.ctx, req.Worker)
	}
	var nl *shardapi.NotLeaderError
	switch {
	// Replies echo Iter (an AddWorker's from): the client matches on it.
	case errors.As(err, &nl):
		s.send(c, req.Op, req.PushID, verdict{status: shardapi.ReplyNotLeader, leader: string(nl.Leader)})
	case err != nil:
		s.send(c, req.Op, req.PushID, verdict{status: shardapi.ReplyError, detail: err.Error()})
	default:
		c.send(shardapi.Reply{Op: req.Op, PushID: req.PushID, Status: shardapi.ReplyOK, Clock: clk}, nil)
	}
}
