package node

import (
	"dsspmesh/node/job"
	"dsspmesh/node/worker"
)

// newWorker builds the worker room for spec on the built-in Go model's
// compute, with the lab's emulation, and with local rounds (--local-steps
// > 1) run by the inner optimizer around it (worker.LocalRounds).
func (n *Node) newWorker(spec job.Spec) (*worker.Worker, error) {
	mc, err := worker.NewModelCompute(n.model, n.train, n.id, spec.BatchSize, spec.Seed, spec.Balance)
	if err != nil {
		return nil, err
	}
	if !spec.Rounds() {
		var own worker.Own
		if spec.Deltas() {
			// The combine rule mean: the worker steps the job's optimizer
			// itself and pushes the step's change.
			own = worker.Own{Kind: spec.Optimizer, Momentum: spec.Momentum, Rate: spec.ShardOptimizer().Schedule.Rate}
		}
		return n.newWorkerOn(spec, n.emulate(spec, mc), own)
	}
	// Each inner step is stretched on its own; the fault poison makes a
	// round's pseudo-gradient NaN (every --fault-nan-every-th push, as
	// without rounds), not every round with one poisoned step in it.
	in := spec.Inner()
	stretched := worker.Emulate(mc, worker.Emulation{Slowdown: n.cfg.Slowdown, Delay: n.cfg.ComputeDelay, Batch: spec.BatchSize})
	comp, err := worker.LocalRounds(stretched, worker.InnerOptimizer{Kind: in.Kind, LR: in.LR})
	if err != nil {
		return nil, err
	}
	return n.newWorkerOn(spec, worker.Emulate(comp, worker.Emulation{NaNEvery: n.cfg.FaultNaNEvery}), worker.Own{})
}

// newExternalWorker builds the worker room for spec on an attached
// trainer (node/trainer.External), which steps its own optimizer itself
// (the trainer protocol's update "delta") or hands over gradients
// (a job of the combine rule sum).
func (n *Node) newExternalWorker(spec job.Spec, comp worker.Compute) (*worker.Worker, error) {
	return n.newWorkerOn(spec, n.emulate(spec, comp), worker.Own{})
}

// emulate wraps comp in the lab's emulation when --slowdown,
// --compute-delay or the fault poison ask for it.
func (n *Node) emulate(spec job.Spec, comp worker.Compute) worker.Compute {
	return worker.Emulate(comp, worker.Emulation{Slowdown: n.cfg.Slowdown, Delay: n.cfg.ComputeDelay, Batch: spec.BatchSize,
		NaNEvery: n.cfg.FaultNaNEvery})
}

// newWorkerOn builds the worker room for spec on comp, with own its own
// optimizer (zero: comp's pushes are gradients or rounds).
func (n *Node) newWorkerOn(spec job.Spec, comp worker.Compute, own worker.Own) (*worker.Worker, error) {
	slack := int64(0)
	if p, err := spec.Policy(); err == nil && !spec.Deltas() {
		// A kept slice may miss s_L iterations (node/worker/pull.go). Not
		// when the workers push their own optimizer's changes (local
		// rounds, the combine rule mean): a worker that kept its slices
		// would step its optimizer again from the θ its last step started
		// from, without its own change or anyone's — its momentum
		// compounding on one point for s_L steps — so every OK carries the
		// slices.
		slack = p.SL
	}
	m := n.metrics
	return worker.New(worker.Deps{
		ID:        n.id,
		Compute:   comp,
		Transport: n.tr, Members: n.members, Candidates: n.shards.Candidates, Alive: n.isMember,
		Observer: n.obs, Event: n.events.Add, DataPath: n.shards.DataPath, Logger: n.log, Started: n.started,
		Metrics: worker.Metrics{Iterations: m.Iterations, Samples: m.Samples, ComputeSec: m.ComputeSec, WaitSec: m.WaitSec,
			Retries: m.Retries, Refused: m.Refused, PushSeconds: m.PushSeconds, GateHoldSeconds: m.GateHoldSeconds},
	}, worker.Config{Bounds: n.shards.Bounds(), Batch: spec.BatchSize, LocalSteps: spec.Steps(), AutoSteps: spec.LocalStepsAuto, Precision: spec.Precision(), Pipeline: spec.Pipeline,
		PipelineFresh: spec.PipelineFresh, Balance: spec.Balance, Slack: slack, Slowdown: n.cfg.Slowdown, LeaveTimeout: n.cfg.LeaveTimeout,
		Own: own})
}
