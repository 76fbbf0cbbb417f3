package shard

import (
	"context"
	"dsspmesh/shardapi"
	"errors"
	"fmt"
	"time"
)

// Read returns the shard's state after a barrier (leader only): the
// barrier commits through a quorum, so a deposed leader cannot answer
// with stale parameters, and waits until every earlier entry is applied.
func (r *Replica) Read(ctx context.Context) (shardapi.Slice, error) {
	if !r.IsLeader() {
		return shardapi.Slice{}, r.notLeader()
	}
	timeout := r.cfg.ApplyTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	if err := r.raft.Barrier(timeout).Error(); err != nil {
		if isLeadershipErr(err) {
			return shardapi.Slice{}, r.notLeader()
		}
		return shardapi.Slice{}, fmt.Errorf("shard %d: read barrier: %w", r.cfg.Shard, err)
	}
	s, ok := r.fsm.read()
	if !ok {
		return shardapi.Slice{}, fmt.Errorf("shard %d: %w", r.cfg.Shard, shardapi.ErrNotInitialized)
	}
	s.Leader = r.cfg.ID
	return s, nil
}

// read copies the applied state under the FSM's lock.
func (f *FSM) read() (shardapi.Slice, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if !f.initialized {
		return shardapi.Slice{}, false
	}
	return shardapi.Slice{Shard: f.shard, Params: append([]float32(nil), f.theta...), Min: f.gate.Min(), Max: f.gate.Max(),
		Index: f.lastIndex, Samples: f.samples}, true
}

// handleRead answers an opRead on the replica's RPC channel; the barrier
// may take a round trip, so it runs on its own goroutine.
func (s *service) handleRead(c *workerConn, req shardapi.Request) {
	sl, err := s.r.Read(s.r.ctx)
	var nl *shardapi.NotLeaderError
	switch {
	case errors.As(err, &nl):
		s.cnt.notLeader.Add(1)
		c.send(shardapi.Reply{Op: req.Op, PushID: req.PushID, Status: shardapi.ReplyNotLeader, Leader: string(nl.Leader)}, nil)
	case errors.Is(err, shardapi.ErrNotInitialized):
		c.send(shardapi.Reply{Op: req.Op, PushID: req.PushID, Status: shardapi.ReplyRejected, Reason: shardapi.ReasonNotInitialized, Detail: err.Error()}, nil)
	case err != nil:
		c.send(shardapi.Reply{Op: req.Op, PushID: req.PushID, Status: shardapi.ReplyError, Detail: err.Error()}, nil)
	default:
		c.send(shardapi.Reply{Op: req.Op, PushID: req.PushID, Status: shardapi.ReplyOK,
			Clock: sl.Min, Max: sl.Max, Index: sl.Index, Samples: sl.Samples}, shardapi.FP32.Append(nil, sl.Params))
	}
}
