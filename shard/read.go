package shard

import (
	"context"
	"fmt"
	"time"

	"dsspmesh/mesh"
	"dsspmesh/shardapi"
)

// Read returns the shard's state after a barrier (leader only): the
// barrier commits through a quorum, so a deposed leader cannot answer
// with stale parameters, and waits until every earlier entry is applied.
func (m *member) Read(ctx context.Context) (shardapi.Slice, error) {
	var s shardapi.Slice
	err := m.read(ctx, func(st *state) { s = sliceOf(st, m.cfg.ID, append([]float32(nil), st.params.theta...)) })
	return s, err
}

// readFP32 is Read with the parameters in their fp32 encoding, made under
// the FSM's lock straight from θ: a read reply holds one copy of the
// slice, not a copy and its encoding.
func (m *member) readFP32(ctx context.Context) (shardapi.Slice, []byte, error) {
	var s shardapi.Slice
	var b []byte
	err := m.read(ctx, func(st *state) { s, b = sliceOf(st, m.cfg.ID, nil), shardapi.FP32.Append(nil, st.params.theta) })
	return s, b, err
}

// read runs the barrier, then take under the FSM's read lock, once the
// shard is initialized.
func (m *member) read(ctx context.Context, take func(*state)) error {
	if !m.IsLeader() {
		return m.notLeader()
	}
	timeout := m.cfg.ApplyTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	if err := m.raft.Barrier(timeout).Error(); err != nil {
		if isLeadershipErr(err) {
			return m.notLeader()
		}
		return fmt.Errorf("shard %d: read barrier: %w", m.cfg.Shard, err)
	}
	var err error
	m.fsm.read(func(st *state) {
		if !st.job.initialized {
			err = fmt.Errorf("shard %d: %w", m.cfg.Shard, shardapi.ErrNotInitialized)
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
