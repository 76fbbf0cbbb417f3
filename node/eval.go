package node

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"dsspmesh/mesh"
	"dsspmesh/node/status"
)

// evaluator is the live training member with the lowest node id: every
// node computes the same answer from the same membership view, and when it
// dies the next one takes over at its next tick.
func (n *Node) evaluator() string {
	for _, m := range n.members.Members() { // sorted by id
		if m.Trains {
			return string(m.ID)
		}
	}
	return ""
}

// setEval keeps e if it is newer than the evaluation held: a larger Seq
// (the mesh's own order of parameter states) from the same evaluator, or
// the same Seq evaluated later, or any evaluation by another evaluator (a
// new evaluator's sequence starts from its own first evaluation: seq is
// keyed by the evaluator). Wall-clock time alone never wins, so a peer
// with a fast clock cannot freeze the evaluation shown. setEval takes this
// node's own evaluations and those receiveEval accepted. A diverged
// evaluation made here stops this node's worker: the evaluator saw the
// non-finite loss itself.
func (n *Node) setEval(e EvalResult) {
	n.keepEval(e)
	n.mu.RLock()
	w := n.worker
	n.mu.RUnlock()
	if e.Diverged && w != nil {
		n.diverged(w, fmt.Sprintf("evaluation by %s at sequence %d (its iteration %d) gave loss %v, accuracy %v", e.By, e.Seq, e.Iter, e.Loss, e.Accuracy))
	}
}

func (n *Node) keepEval(e EvalResult) {
	n.mu.Lock()
	defer n.mu.Unlock()
	newer := n.eval == nil || e.By != n.eval.By || e.Seq > n.eval.Seq || e.Seq == n.eval.Seq && e.At.After(n.eval.At)
	if newer {
		n.eval = &e
		n.evals = append(n.evals, e)
		if len(n.evals) > evalHistorySize {
			n.evals = slices.Delete(n.evals, 0, len(n.evals)-evalHistorySize)
		}
	}
}

// seqSlack is how many pushes of the job's largest an honest evaluation's
// Seq may run ahead of twice the samples the replicas here count, per shard.
const seqSlack = 4096

// seqBound is the largest Seq an honest evaluation can carry as this node
// sees the shards (shards.Manager.SeqBound); ok is false when it cannot
// say (no replica here yet).
func (n *Node) seqBound() (uint64, bool) {
	if b := n.claims.bound; b != nil {
		return b()
	}
	n.mu.RLock()
	sh := n.shards
	n.mu.RUnlock()
	if sh == nil {
		return 0, false
	}
	return sh.SeqBound(seqSlack)
}

// maxEvalSeq bounds an evaluation's Seq: the sum of the shards' sample
// counts, each an int64 the FSM keeps in its domain, so a Seq beyond
// MaxInt64 is no state of the parameters.
const maxEvalSeq = math.MaxInt64

// evalWarnEvery limits the WARN lines of dropped evaluations and ignored
// divergence claims to one per this interval (the rest are counted).
const evalWarnEvery = 10 * time.Second

// receiveEval judges an evaluation that peer sent over the control
// channel (peer is the authenticated stream's node id). It is taken only
// from the member this node's own view designates as evaluator, and only
// with a Seq in the domain (at most MaxInt64, and at most seqBound: a Seq
// far ahead of the samples the shards here count cannot pin the
// evaluation shown); anything else is dropped, counted and logged
// at WARN (rate-limited), and the error says why. A diverged claim does not
// stop this node's worker by itself: the node reads the parameters and
// checks them (checkDiverged); the claim is shown only once confirmed.
func (n *Node) receiveEval(ctx context.Context, peer mesh.NodeID, e EvalResult) error {
	var why string
	switch ev := n.evaluator(); {
	case e.By != string(peer):
		why = fmt.Sprintf("eval by %q sent by %q", e.By, peer) // every peer acts only as itself
	case string(peer) != ev:
		why = fmt.Sprintf("eval from %q, not the evaluator (%q)", peer, ev)
	case e.Seq > maxEvalSeq:
		why = fmt.Sprintf("eval from %q with sequence %d beyond any state of the parameters", peer, e.Seq)
	default:
		if bound, ok := n.seqBound(); ok && e.Seq > bound {
			why = fmt.Sprintf("eval from %q with sequence %d far ahead of the samples the shards here count (at most %d)", peer, e.Seq, bound)
		}
	}
	if why != "" {
		n.warnClaim("evaluation dropped", "reason", why)
		return errors.New(why)
	}
	if !e.Diverged {
		n.setEval(e)
		return nil
	}
	n.checkDiverged(ctx, e) // kept once confirmed
	return nil
}

// warnClaim counts a claim not acted on and logs it at WARN, at most once
// per evalWarnEvery.
func (n *Node) warnClaim(msg string, args ...any) {
	c := &n.claims
	c.mu.Lock()
	c.dropped++
	dropped := c.dropped
	now := n.now()
	warn := now.Sub(c.warned) >= evalWarnEvery
	if warn {
		c.warned = now
	}
	c.mu.Unlock()
	if warn && n.log != nil {
		n.log.Warn(msg, append(args, "dropped_total", dropped)...)
	}
}

// EvalClaimsDropped is how many evaluations from peers were not acted on.
func (n *Node) EvalClaimsDropped() uint64 {
	n.claims.mu.Lock()
	defer n.claims.mu.Unlock()
	return n.claims.dropped
}

// checkDiverged acts on the evaluator's claim that the job diverged: in
// the background, at most one check at a time and one per evalWarnEvery,
// this node reads the parameters and stops its worker only if it sees the
// divergence itself; otherwise the claim is logged at WARN and ignored.
func (n *Node) checkDiverged(ctx context.Context, e EvalResult) {
	n.mu.RLock()
	w := n.worker
	n.mu.RUnlock()
	if w == nil {
		return
	}
	c := &n.claims
	c.mu.Lock()
	now := n.now()
	if c.checking || !c.checkedAt.IsZero() && now.Sub(c.checkedAt) < evalWarnEvery {
		c.mu.Unlock()
		return
	}
	c.checking, c.checkedAt = true, now
	check := c.check
	c.mu.Unlock()
	if check == nil {
		check = n.checkParameters
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer func() { c.mu.Lock(); c.checking = false; c.mu.Unlock() }()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
		defer cancel()
		bad, what, err := check(cctx)
		switch {
		case err != nil:
			n.warnClaim("divergence claim not checked; training goes on", "by", e.By, "seq", e.Seq, "err", err)
		case !bad:
			n.warnClaim("divergence claim ignored: the parameters read here are finite and evaluate to a finite loss; training goes on", "by", e.By, "seq", e.Seq)
		default:
			n.keepEval(e)
			n.diverged(w, fmt.Sprintf("%s claimed it at sequence %d and this node saw it itself: %s", e.By, e.Seq, what))
		}
	}()
}

// checkParameters reads the global parameters (from every shard's leader,
// as an evaluation does) and says whether they diverged: a non-finite
// value, or a non-finite loss on this node's test set.
func (n *Node) checkParameters(ctx context.Context) (bool, string, error) {
	if n.snaps == nil || n.evalModel == nil {
		return false, "", errors.New("this node holds no model to check")
	}
	snap, err := n.snaps.Read(ctx, "divergence check", make([]float32, n.evalModel.NumParams()))
	if err != nil {
		return false, "", err
	}
	for i, v := range snap.Theta {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return true, fmt.Sprintf("parameter %d is %v", i, v), nil
		}
	}
	ev, err := n.evalModel.Evaluate(snap.Theta, n.test)
	if err != nil {
		return false, "", err
	}
	if !finiteFloat(ev.Loss) || !finiteFloat(ev.Accuracy) {
		return true, fmt.Sprintf("its evaluation here gave loss %v, accuracy %v", ev.Loss, ev.Accuracy), nil
	}
	return false, "", nil
}

func finiteFloat(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// diverged stops the worker: a non-finite loss at evaluation means the job
// diverged, and training on garbage only wastes the mesh. The shards keep
// their parameters (the FSM keeps them finite) and the evaluator never
// checkpoints a diverged state, so the newest checkpoint in
// --checkpoint-dir is the last good one to restart from (--init-from),
// with a smaller --lr. The node's phase becomes "diverged" and /status
// says why (Stopped).
func (n *Node) diverged(w workerLoop, what string) {
	reason := "the job diverged: " + what + "; " +
		"workers stop rather than train on garbage — restart from the last checkpoint (--init-from) with a smaller --lr"
	w.Stop(reason)
	n.mu.Lock()
	if n.stopped == "" {
		n.stopped = reason
		if n.phase == "training" {
			n.phase = "diverged"
		}
	}
	n.mu.Unlock()
}

// Status is this node's view of the mesh; safe for concurrent use.
func (n *Node) Status() Status {
	s := Status{Node: string(n.id), Gossip: n.cfg.GossipAddr(), QUIC: n.cfg.QUICAddr(), HTTP: n.httpAddr, Started: n.started, Now: n.now(),
		Members: []MemberStatus{}, Shards: []ShardStatus{}, Workers: []WorkerStatus{}, Trainers: []TrainerStatus{}}
	n.mu.RLock()
	s.Phase, s.Stopped = n.phase, n.stopped
	s.EvalClaimsDropped = n.EvalClaimsDropped()
	if n.spec != nil {
		spec := *n.spec
		s.Spec, s.Policy = &spec, spec.PolicyText()
	}
	if n.eval != nil {
		e := *n.eval
		s.Eval = &e
	}
	s.EvalHistory = append([]EvalResult{}, n.evals...)
	shards, w, ext := n.shards, n.worker, n.ext
	n.mu.RUnlock()
	if ext != nil {
		s.Trainer = ext.Status()
	}
	if n.members != nil {
		for _, m := range n.members.Members() {
			s.Members = append(s.Members, MemberStatus{ID: string(m.ID), Gossip: m.Addr, QUIC: m.QUICAddr, Trains: m.Trains, Backend: m.Backend})
		}
		s.Evaluator = n.evaluator()
	}
	s.Insecure = n.cfg.Insecure
	if n.trust != nil {
		s.Revoked, s.PinnedKeys, s.IdentityConflicts = n.trust.Status()
	}
	if n.snaps != nil {
		s.Checkpoint = n.snaps.Latest()
	}
	if shards != nil {
		s.Refusals = shards.Refusals()
		s.Shards, s.Workers = shards.Status()
		live := make([]mesh.NodeID, 0, len(s.Members))
		for _, m := range s.Members {
			live = append(live, mesh.NodeID(m.ID))
		}
		n.view.JudgeQuorum(n.id, live, s.Now, s.Shards)
		if s.Workers == nil {
			s.Workers = []WorkerStatus{}
		}
	}
	if w != nil {
		s.Worker = w.Status()
	}
	n.view.Fill(&s)
	s.Events = n.events.List()
	s.Warnings = status.Warnings(&s)
	if n.tr != nil {
		ts := n.tr.Stats()
		s.Transport = TransportStatus{FrameErrors: ts.FrameErrors, PreambleErrors: ts.PreambleErrors, DialFailures: ts.DialFailures, Dials: ts.Dials}
	}
	return s
}
