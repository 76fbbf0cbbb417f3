package node

import (
	"context"
	"errors"
	"fmt"
	"math"

	"dsspmesh/cudaops"
	"dsspmesh/mesh"
	"dsspmesh/node/eval"
	"dsspmesh/node/records"
	"dsspmesh/node/status"
)

// evaluator is the worker the evaluation lease names (docs/design.md, "The
// evaluator"): the lowest id among shard 0's workers with a push applied,
// a member that proved it trains rather than one that says so. A node
// hosting shard 0 reads its replica (the applied state); a training node
// without one takes the lease from the last OK of shard 0; any other asks
// its view of the leader of shard 0. The replica comes first: a worker
// the gate holds hears no OK, so its last one can name an earlier holder
// for as long as it waits. When the holder's worker leaves the gate (its
// node dead, its trainer detached, revoked) the next one is named at
// once, and evaluates within 250 ms of hearing it (node/eval's loop).
func (n *Node) evaluator() string {
	n.mu.RLock()
	w, sh := n.worker, n.shards
	n.mu.RUnlock()
	if sh != nil {
		if e := sh.Evaluator(); e != "" {
			return e
		}
	}
	if w != nil {
		if st := w.Status(); st != nil && st.Evaluator != "" {
			return st.Evaluator
		}
	}
	if st, ok := n.view.Leader(0); ok {
		return st.Evaluator
	}
	return ""
}

// newClaims is the evaluation room's record of the evaluations this node
// holds and its judgement of those peers send (eval.Claims).
func (n *Node) newClaims() *eval.Claims {
	return eval.NewClaims(eval.ClaimDeps{Evaluator: n.evaluator, Now: n.now, Logger: n.log, Diverged: n.diverged,
		SeqBound: func() (uint64, bool) {
			n.mu.RLock()
			sh := n.shards
			n.mu.RUnlock()
			if sh == nil {
				return 0, false
			}
			return sh.SeqBound(eval.SeqSlack)
		},
		Check: func(ctx context.Context) (bool, string, error) {
			if n.snaps == nil || n.evalModel == nil {
				return false, "", errors.New("this node holds no model to check")
			}
			return n.snaps.CheckParameters(ctx, n.evalModel.NumParams(), func(theta []float32) (cudaops.Eval, error) {
				return n.evalModel.Evaluate(theta, n.test)
			})
		},
		Training: func() bool { n.mu.RLock(); defer n.mu.RUnlock(); return n.worker != nil },
		Settings: n.learningSettings,
		StartLoss: func() float64 {
			n.mu.RLock()
			w := n.worker
			n.mu.RUnlock()
			if w == nil {
				return math.NaN()
			}
			if st := w.Status(); st != nil && st.StartLoss > 0 {
				return st.StartLoss
			}
			return math.NaN()
		},
		Accepted: func(e records.EvalResult) {
			if n.snaps != nil {
				n.snaps.Audit(e)
			}
		},
		Go: n.wg.Go,
	})
}

// diverged stops the worker, if any (eval.ClaimDeps.Diverged): a
// non-finite loss at evaluation means the job diverged, and training on
// garbage only wastes the mesh. The shards keep
// their parameters (the FSM keeps them finite) and the evaluator never
// checkpoints a diverged state, so the newest checkpoint in
// --checkpoint-dir is the last good one to restart from (--init-from),
// with a smaller --lr. The node's phase becomes "diverged" and /status
// says why (Stopped).
func (n *Node) diverged(what string) {
	n.mu.RLock()
	w := n.worker
	n.mu.RUnlock()
	if w == nil {
		return
	}
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
func (n *Node) Status() status.Status {
	s := status.Status{Node: string(n.id), Gossip: n.cfg.GossipAddr(), QUIC: n.cfg.QUICAddr(), HTTP: n.httpAddr, Started: n.started, Now: n.now(),
		Members: []status.MemberStatus{}, Shards: []records.ShardStatus{}, Workers: []records.WorkerStatus{}, Trainers: []status.TrainerStatus{}}
	n.mu.RLock()
	s.Phase, s.Stopped = n.phase, n.stopped
	if n.spec != nil {
		spec := *n.spec
		s.Spec, s.Policy = &spec, spec.PolicyText()
	}
	shards, w, ext := n.shards, n.worker, n.ext
	n.mu.RUnlock()
	if n.claims != nil {
		s.EvalClaimsDropped = n.claims.Dropped()
		s.Eval, s.EvalHistory = n.claims.Held()
	}
	if ext != nil {
		s.Trainer = ext.Status()
	}
	if n.members != nil {
		for _, m := range n.members.Members() {
			ms := status.MemberStatus{ID: string(m.ID), Gossip: m.Addr, QUIC: m.QUICAddr, Trains: m.Trains, Backend: m.Backend}
			if r, ok := n.peerRTT(m.ID); ok {
				ms.RTTMs = &r
			}
			s.Members = append(s.Members, ms)
		}
		s.Evaluator = n.evaluator()
	}
	s.Insecure = n.cfg.Insecure
	if n.trust != nil {
		s.Revoked, s.PinnedKeys, s.IdentityConflicts = n.trust.Status()
		s.RevokedSelf, s.RevocationsRefused = n.trust.SelfRevoked(), n.trust.Refused()
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
			s.Workers = []records.WorkerStatus{}
		}
	}
	if w != nil {
		s.Worker = w.Status()
	}
	n.view.Fill(&s)
	s.Events = n.events.List()
	s.Warnings = status.Warnings(&s)
	if n.claims != nil {
		if s.Learning = n.claims.Learning(); s.Learning != "" {
			s.Warnings = append(s.Warnings, s.Learning)
		}
	}
	if n.snaps != nil {
		var alarm string
		s.EvalAudit, s.EvalAudits, alarm = n.snaps.AuditStatus(s.Now)
		if alarm != "" {
			s.Warnings = append(s.Warnings, alarm)
		}
	}
	if n.tr != nil {
		ts := n.tr.Stats()
		s.Transport = status.TransportStatus{FrameErrors: ts.FrameErrors, PreambleErrors: ts.PreambleErrors, DialFailures: ts.DialFailures, Dials: ts.Dials}
	}
	return s
}

// learningSettings names the settings the learning check's warning points
// at: the staleness bound and the learning rate in force (an external
// trainer's own, as its last update said, else the job's).
func (n *Node) learningSettings() string {
	n.mu.RLock()
	spec, ext := n.spec, n.ext
	n.mu.RUnlock()
	if spec == nil {
		return ""
	}
	out := "staleness bound: " + spec.PolicyText()
	if p, err := spec.Policy(); err == nil && p.Bounded() {
		out += fmt.Sprintf(" (s_U = %d iterations)", p.SU())
	}
	lr := fmt.Sprintf("the job's --lr %g", spec.LR)
	if ext != nil {
		if st := ext.Status(); st != nil && st.LR > 0 {
			lr = fmt.Sprintf("the trainer's optimizer at lr %g", st.LR)
		} else {
			lr = "the trainers' optimizers"
		}
	}
	return out + ", learning rate: " + lr + "; a smaller learning rate or bound (--paradigm bsp, --s-lower 1) trains where this does not"
}
