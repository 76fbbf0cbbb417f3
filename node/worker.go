package node

import (
	"dsspmesh/node/worker"
)

// newWorker builds the worker room for spec: the Go model's compute, with
// the lab's emulation around it when --slowdown, --compute-delay or the
// fault poison ask for it.
func (n *Node) newWorker(spec JobSpec) (*worker.Worker, error) {
	comp, err := worker.NewModelCompute(n.model, n.train, n.id, spec.BatchSize, spec.Seed, spec.Balance)
	if err != nil {
		return nil, err
	}
	return n.newWorkerOn(spec, comp)
}

// newWorkerOn builds the worker room for spec on comp: the Go model's
// compute or an attached trainer (node/trainer.External).
func (n *Node) newWorkerOn(spec JobSpec, comp worker.Compute) (*worker.Worker, error) {
	slack := int64(0)
	if p, err := spec.Policy(); err == nil {
		slack = p.SL // a kept slice may miss s_L iterations (node/worker/pull.go)
	}
	m := n.metrics
	return worker.New(worker.Deps{
		ID: n.id,
		Compute: worker.Emulate(comp, worker.Emulation{Slowdown: n.cfg.Slowdown, Delay: n.cfg.ComputeDelay, Batch: spec.BatchSize,
			NaNEvery: n.cfg.FaultNaNEvery}),
		Transport: n.tr, Members: n.members, Candidates: n.shards.Candidates, Alive: n.isMember,
		Observer: n.obs, Event: n.events.Add, DataPath: n.shards.DataPath, Logger: n.log,
		Metrics: worker.Metrics{Iterations: m.Iterations, Samples: m.Samples, ComputeSec: m.ComputeSec, WaitSec: m.WaitSec,
			Retries: m.Retries, Refused: m.Refused, PushSeconds: m.PushSeconds, GateHoldSeconds: m.GateHoldSeconds},
	}, worker.Config{Bounds: n.shards.Bounds(), Batch: spec.BatchSize, Precision: spec.Precision(), Pipeline: spec.Pipeline,
		PipelineFresh: spec.PipelineFresh, Balance: spec.Balance, Slack: slack, Slowdown: n.cfg.Slowdown})
}
