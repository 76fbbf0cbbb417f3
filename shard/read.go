package shard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"dsspmesh/mesh"
	"dsspmesh/shardapi"
)

// Read returns the shard's state after a barrier (leader only): the
// barrier commits through a quorum, so a deposed leader cannot answer
// with stale parameters, and waits until every earlier entry is applied.
func (r *Replica) Read(ctx context.Context) (shardapi.Slice, error) {
	var s shardapi.Slice
	err := r.read(ctx, func(st *state) { s = sliceOf(st, r.cfg.ID, append([]float32(nil), st.params.theta...)) })
	return s, err
}

// readFP32 is Read with the parameters in their fp32 encoding, made under
// the FSM's lock straight from θ: a read reply holds one copy of the
// slice, not a copy and its encoding.
func (r *Replica) readFP32(ctx context.Context) (shardapi.Slice, []byte, error) {
	var s shardapi.Slice
	var b []byte
	err := r.read(ctx, func(st *state) { s, b = sliceOf(st, r.cfg.ID, nil), shardapi.FP32.Append(nil, st.params.theta) })
	return s, b, err
}

// read runs the barrier, then take under the FSM's read lock, once the
// shard is initialized.
func (r *Replica) read(ctx context.Context, take func(*state)) error {
	if !r.IsLeader() {
		return r.notLeader()
	}
	timeout := r.cfg.ApplyTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	if err := r.raft.Barrier(timeout).Error(); err != nil {
		if isLeadershipErr(err) {
			return r.notLeader()
		}
		return fmt.Errorf("shard %d: read barrier: %w", r.cfg.Shard, err)
	}
	var err error
	r.fsm.read(func(st *state) {
		if !st.job.initialized {
			err = fmt.Errorf("shard %d: %w", r.cfg.Shard, shardapi.ErrNotInitialized)
			return
		}
		take(st)
	})
	return err
}

// sliceOf is the applied state with params as its parameters, read from
// leader.
func sliceOf(st *state, leader mesh.NodeID, params []float32) shardapi.Slice {
	return shardapi.Slice{Shard: st.shard, Leader: leader, Params: params, Min: st.gate.g.Min(), Max: st.gate.g.Max(),
		Index: uint64(st.index), Samples: st.tally.samples}
}

// handleRead answers an opRead on the replica's RPC channel; the barrier
// may take a round trip, so it runs on its own goroutine.
func (s *service) handleRead(c *workerConn, req shardapi.Request) {
	sl, params, err := s.r.readFP32(s.r.ctx)
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
			Clock: sl.Min, Max: sl.Max, Index: sl.Index, Samples: sl.Samples}, params)
	}
}
