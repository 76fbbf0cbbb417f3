package node

import (
	"context"
	"time"
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

// evalLoop evaluates this worker's θ (fresh from every shard after its last
// completed iteration) every EvalEvery while this node is the evaluator,
// and sends the result to every member.
func (n *Node) evalLoop(ctx context.Context) {
	t := time.NewTicker(n.cfg.EvalEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n.evaluator() != string(n.id) {
			continue
		}
		theta, iter := n.worker.snapshot()
		if theta == nil {
			continue
		}
		start := time.Now()
		ev, err := n.evalModel.Evaluate(theta, n.test)
		n.metrics.EvalSeconds.Observe(time.Since(start).Seconds())
		if err != nil {
			n.log.Warn("evaluate", "err", err)
			continue
		}
		e := EvalResult{Accuracy: ev.Accuracy, Loss: ev.Loss, Samples: ev.Samples, At: time.Now(), By: string(n.id), Iter: iter}
		n.metrics.Evals.Inc()
		n.setEval(e)
		n.broadcastEval(ctx, e)
		n.log.Info("evaluated", "accuracy", ev.Accuracy, "loss", ev.Loss, "iter", iter)
	}
}

// Status is this node's view of the mesh; safe for concurrent use.
func (n *Node) Status() Status {
	s := Status{Node: string(n.id), Gossip: n.cfg.GossipAddr(), QUIC: n.cfg.QUICAddr(), Started: n.started, Now: time.Now(),
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
	if shards != nil {
		s.Shards, s.Workers = shards.status()
		if s.Workers == nil {
			s.Workers = []WorkerStatus{}
		}
	}
	if w != nil {
		s.Worker = w.status()
	}
	n.view.fill(&s)
	s.Events = n.events.list()
	if n.tr != nil {
		ts := n.tr.Stats()
		s.Transport = TransportStatus{FrameErrors: ts.FrameErrors, PreambleErrors: ts.PreambleErrors, DialFailures: ts.DialFailures, Dials: ts.Dials}
	}
	return s
}
