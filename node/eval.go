package node

import (
	"fmt"
	"slices"

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
// (the mesh's own order of parameter states), or the same Seq evaluated
// later. Wall-clock time alone never wins, so a peer with a fast clock
// cannot freeze the evaluation shown. A diverged evaluation stops this
// node's worker.
func (n *Node) setEval(e EvalResult) {
	n.mu.Lock()
	newer := n.eval == nil || e.Seq > n.eval.Seq || e.Seq == n.eval.Seq && e.At.After(n.eval.At)
	if newer {
		n.eval = &e
		n.evals = append(n.evals, e)
		if len(n.evals) > evalHistorySize {
			n.evals = slices.Delete(n.evals, 0, len(n.evals)-evalHistorySize)
		}
	}
	w := n.worker
	n.mu.Unlock()
	if e.Diverged && w != nil {
		n.diverged(w, e)
	}
}

// diverged stops the worker: a non-finite loss at evaluation means the job
// diverged, and training on garbage only wastes the mesh. The shards keep
// their parameters (the FSM keeps them finite) and the evaluator never
// checkpoints a diverged state, so the newest checkpoint in
// --checkpoint-dir is the last good one to restart from (--init-from),
// with a smaller --lr.
func (n *Node) diverged(w trainer, e EvalResult) {
	reason := fmt.Sprintf("the job diverged: evaluation by %s at sequence %d (its iteration %d) gave loss %v, accuracy %v; "+
		"workers stop rather than train on garbage — restart from the last checkpoint (--init-from) with a smaller --lr", e.By, e.Seq, e.Iter, e.Loss, e.Accuracy)
	w.Stop(reason)
}

// Status is this node's view of the mesh; safe for concurrent use.
func (n *Node) Status() Status {
	s := Status{Node: string(n.id), Gossip: n.cfg.GossipAddr(), QUIC: n.cfg.QUICAddr(), HTTP: n.httpAddr, Started: n.started, Now: n.now(),
		Members: []MemberStatus{}, Shards: []ShardStatus{}, Workers: []WorkerStatus{}, Trainers: []TrainerStatus{}}
	n.mu.RLock()
	s.Phase = n.phase
	if n.spec != nil {
		spec := *n.spec
		s.Spec, s.Policy = &spec, spec.PolicyText()
	}
	if n.eval != nil {
		e := *n.eval
		s.Eval = &e
	}
	s.EvalHistory = append([]EvalResult{}, n.evals...)
	shards, w := n.shards, n.worker
	n.mu.RUnlock()
	if n.members != nil {
		for _, m := range n.members.Members() {
			s.Members = append(s.Members, MemberStatus{ID: string(m.ID), Gossip: m.Addr, QUIC: m.QUICAddr, Trains: m.Trains, Backend: m.Backend})
		}
		s.Evaluator = n.evaluator()
	}
	s.Insecure = n.cfg.Insecure
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
