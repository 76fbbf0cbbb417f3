package shard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"dsspmesh/mesh"
)

// Read returns the shard's state after a barrier (leader only): the
// barrier commits through a quorum, so a deposed leader cannot answer
// with stale parameters, and waits until every earlier entry is applied.
func (r *Replica) Read(ctx context.Context) (Slice, error) {
	if !r.IsLeader() {
		return Slice{}, r.notLeader()
	}
	timeout := r.cfg.ApplyTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	if err := r.raft.Barrier(timeout).Error(); err != nil {
		if isLeadershipErr(err) {
			return Slice{}, r.notLeader()
		}
		return Slice{}, fmt.Errorf("shard %d: read barrier: %w", r.cfg.Shard, err)
	}
	s, ok := r.fsm.read()
	if !ok {
		return Slice{}, fmt.Errorf("shard %d: %w", r.cfg.Shard, ErrNotInitialized)
	}
	s.Leader = r.cfg.ID
	return s, nil
}

// read copies the applied state under the FSM's lock.
func (f *FSM) read() (Slice, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if !f.initialized {
		return Slice{}, false
	}
	return Slice{Shard: f.shard, Params: append([]float32(nil), f.theta...), Min: f.gate.Min(), Max: f.gate.Max(),
		Index: f.lastIndex, Samples: f.samples}, true
}

// handleRead answers an opRead on the replica's RPC channel; the barrier
// may take a round trip, so it runs on its own goroutine.
func (s *service) handleRead(c *workerConn, req request) {
	sl, err := s.r.Read(s.r.ctx)
	var nl *NotLeaderError
	switch {
	case errors.As(err, &nl):
		s.cnt.notLeader.Add(1)
		c.send(reply{Op: req.Op, Worker: req.Worker, Iter: req.Iter, Status: statusNotLeader, Leader: string(nl.Leader)}, nil)
	case errors.Is(err, ErrNotInitialized):
		c.send(reply{Op: req.Op, Worker: req.Worker, Iter: req.Iter, Status: statusRejected, Reason: ReasonNotInitialized, Detail: err.Error()}, nil)
	case err != nil:
		c.send(reply{Op: req.Op, Worker: req.Worker, Iter: req.Iter, Status: statusError, Detail: err.Error()}, nil)
	default:
		c.send(reply{Op: req.Op, Worker: req.Worker, Iter: req.Iter, Status: statusOK,
			Clock: sl.Min, Max: sl.Max, Index: sl.Index, Samples: sl.Samples}, mesh.AppendFloat32s(nil, sl.Params))
	}
}
