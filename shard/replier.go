package shard

import (
	"maps"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"dsspmesh/shardapi"
)

// replier is the leader's last stage (docs/design.md, "The leader by
// stage"): settle, decide, answer, hold until a later Apply releases
// (evaluate), and the Held and Pending keep-alives while it leads.
type replier struct {
	m   *member
	cnt *serviceCounters

	mu      sync.Mutex
	stopped bool
	held    map[replyTo]struct{}
	// pending: pushes queued or in an entry in flight, not answered yet;
	// keepAlive sends them Pending frames while this replica leads.
	pending map[replyTo]int
}

func newReplier(m *member, cnt *serviceCounters) *replier {
	return &replier{m: m, cnt: cnt, held: map[replyTo]struct{}{}, pending: map[replyTo]int{}}
}

// stop forgets every push; no reply is held from now on.
func (r *replier) stop() {
	r.mu.Lock()
	r.stopped = true
	r.held, r.pending = map[replyTo]struct{}{}, map[replyTo]int{}
	r.mu.Unlock()
}

// forget drops the pushes that wait on c, a stream that ended.
func (r *replier) forget(c *workerConn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	maps.DeleteFunc(r.held, func(k replyTo, _ struct{}) bool { return k.c == c })
	maps.DeleteFunc(r.pending, func(k replyTo, _ int) bool { return k.c == c })
}

func (r *replier) heldCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.held)
}

// track adds d to the pushes t's stream waits on without a decision yet
// (queued or in flight), for keepAlive's Pending frames.
func (r *replier) track(t *ticket, d int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.stopped {
		if r.pending[t.to] += d; r.pending[t.to] <= 0 {
			delete(r.pending, t.to)
		}
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
		return shardapi.Reply{Status: shardapi.ReplyOK, Index: ver.Index, Clock: ver.Min, Samples: ver.Samples}, false
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

// settle answers (or holds) push t from the applied state as decide says
// at stage at, with the parameters unless t.to.keep; it returns true if
// the push is not applied yet and should be proposed.
func (r *replier) settle(t *ticket, at stage) bool {
	k := t.to
	r.mu.Lock()
	st, params, ver := r.m.fsm.replyFor(k.Worker, k.Iter, !k.keep)
	_, already := r.held[k]
	if st == replyHeld && !r.stopped {
		r.held[k] = struct{}{}
	}
	r.mu.Unlock()
	rep, propose := decide(st, ver, at)
	if propose {
		return true
	}
	if rep.Status == shardapi.ReplyHeld && !already {
		r.cnt.held.Add(1)
	}
	r.answer(k, rep, params)
	return false
}

// answer sends a push's decided reply rep to k, with the parameters and
// shard 0's assignments and evaluator when it is an OK.
func (r *replier) answer(k replyTo, rep shardapi.Reply, params []byte) {
	rep.Op, rep.PushID = shardapi.OpPush, k.PushID
	if rep.Status != shardapi.ReplyOK {
		params = nil
	} else {
		r.m.fsm.read(func(st *state) {
			rep.Assign, rep.Ahead = st.bal.assignments(k.Worker, k.Iter)
			if st.job.initialized && st.job.spec.Shard == 0 {
				rep.Evaluator = string(st.gate.evaluator())
			}
		})
	}
	r.send(k.c, rep, params)
}

// send sends rep with payload on c and counts it.
func (r *replier) send(c *workerConn, rep shardapi.Reply, payload []byte) {
	switch rep.Status {
	case shardapi.ReplyOK:
		if rep.Op == shardapi.OpPush {
			r.cnt.acked.Add(1)
		}
	case shardapi.ReplyRejected:
		r.cnt.rejected.Add(1)
	case shardapi.ReplyNotLeader:
		r.cnt.notLeader.Add(1)
	}
	c.send(rep, payload)
}

func (r *replier) reject(c *workerConn, op shardapi.Op, id shardapi.PushID, reason shardapi.Reason, detail string) {
	r.send(c, shardapi.Reply{Op: op, PushID: id, Status: shardapi.ReplyRejected, Reason: reason, Detail: detail}, nil)
}

func (r *replier) notLeader(c *workerConn, op shardapi.Op, id shardapi.PushID) {
	r.send(c, shardapi.Reply{Op: op, PushID: id, Status: shardapi.ReplyNotLeader, Leader: string(r.m.Leader())}, nil)
}

// sendPush answers a push on c with a reply of status st and detail
// alone (Held, Pending, Error).
func (r *replier) sendPush(c *workerConn, id shardapi.PushID, st shardapi.ReplyStatus, detail string) {
	r.send(c, shardapi.Reply{Op: shardapi.OpPush, PushID: id, Status: st, Detail: detail}, nil)
}

// evaluate re-examines held replies after every Apply, sends keep-alives
// and hands held workers to the next leader when this replica stops leading.
func (r *replier) evaluate() {
	tick := time.NewTicker(r.m.cfg.HeldKeepAlive)
	defer tick.Stop()
	lead := r.m.LeaderChanged()
	for {
		select {
		case <-r.m.fsm.applied():
			r.reevaluate()
		case <-tick.C:
			r.keepAlive()
		case <-lead:
			// Deposed: held workers hear NotLeader now, not at the next tick.
			lead = r.m.LeaderChanged()
			if !r.m.IsLeader() {
				r.keepAlive()
			}
		case <-r.m.ctx.Done():
			return
		}
	}
}

func (r *replier) reevaluate() {
	type out struct {
		k      replyTo
		st     replyState
		params []byte
		ver    shardapi.Version
	}
	var outs []out
	r.mu.Lock()
	for k := range r.held {
		st, params, ver := r.m.fsm.replyFor(k.Worker, k.Iter, !k.keep)
		if st != replyHeld {
			delete(r.held, k)
			outs = append(outs, out{k, st, params, ver})
		}
	}
	r.mu.Unlock()
	for _, o := range outs {
		rep, _ := decide(o.st, o.ver, onRelease)
		r.answer(o.k, rep, o.params)
	}
}

func (r *replier) keepAlive() {
	leading := r.m.raft.State() == raft.Leader
	r.mu.Lock()
	keys := make([]replyTo, 0, len(r.held))
	for k := range r.held {
		keys = append(keys, k)
		if !leading {
			delete(r.held, k)
		}
	}
	var pend []replyTo
	if leading {
		// Pushes not decided yet: their entry is queued or replicating.
		// A deposed leader sends none; the proposer answers them
		// (NotLeader) when their proposals fail.
		pend = make([]replyTo, 0, len(r.pending))
		for k := range r.pending {
			pend = append(pend, k)
		}
	}
	r.mu.Unlock()
	for _, k := range pend {
		k.c.s.SetReadDeadline(time.Now().Add(r.m.cfg.IdleStreamTimeout))
		r.cnt.pendingFrames.Add(1)
		r.sendPush(k.c, k.PushID, shardapi.ReplyPending, "")
	}
	for _, k := range keys {
		if leading {
			k.c.s.SetReadDeadline(time.Now().Add(r.m.cfg.IdleStreamTimeout))
			r.sendPush(k.c, k.PushID, shardapi.ReplyHeld, "")
		} else {
			r.notLeader(k.c, shardapi.OpPush, k.PushID)
		}
	}
}
