package shard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"dsspmesh/mesh"
)

// Slice is a linearizable read of one shard: its parameter slice and clocks
// as of a Raft barrier on its leader, so every push committed before the
// read began is in it.
type Slice struct {
	Shard    uint32
	Leader   mesh.NodeID // the replica that answered
	Params   []float32
	Min, Max int64  // t_min and t_max of the shard's clock table
	Index    uint64 // the applied index the slice is at
	Samples  int64  // samples applied to the shard
}

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
			Clock: sl.Min, Max: sl.Max, Index: sl.Index, Samples: sl.Samples}, appendFloat32s(nil, sl.Params))
	}
}

// Read asks the shard's leader for a linearizable read of its parameters
// and clocks ([Replica.Read]), following NotLeader redirects and retrying
// other replicas until ctx (or Config.Deadline) ends (an error wrapping
// ErrDeadline). A read changes nothing, so retrying is always safe. A shard
// without its Init entry yet gives an error wrapping ErrNotInitialized.
func (c *Client) Read(ctx context.Context) (Slice, error) {
	c.reads++
	rep, params, err := c.call(ctx, request{Op: opRead, Worker: c.cfg.Worker, Iter: c.reads}, nil)
	if errors.Is(err, ErrRejected) {
		return Slice{}, fmt.Errorf("shard %d: read: %w", c.cfg.Shard, ErrNotInitialized)
	}
	if err != nil {
		return Slice{}, err
	}
	sl := Slice{Shard: c.cfg.Shard, Leader: c.leader, Params: make([]float32, len(params)/4),
		Min: rep.Clock, Max: rep.Max, Index: rep.Index, Samples: rep.Samples}
	if err := mesh.Float32s(sl.Params, params); err != nil {
		return Slice{}, fmt.Errorf("shard %d: parameters from leader: %w", c.cfg.Shard, err)
	}
	return sl, nil
}
