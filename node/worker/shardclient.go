package worker

import (
	"context"
	"errors"
	"log/slog"

	"dsspmesh/clock"
	"dsspmesh/mesh"
	"dsspmesh/shardapi"
)

// shardClient is the worker's one door into shardapi.Client: every call
// the worker room makes into the shard API goes through this file, so a
// change of the client's push API is made here alone.
type shardClient struct{ c *shardapi.Client }

// newShardClients dials nothing yet: one client per shard for worker id,
// each finding its shard's leader among candidates, never dialling a node
// alive says is dead, encoding in prec.
func newShardClients(id mesh.NodeID, tr mesh.Transport, members mesh.Membership, candidates func(uint32) []mesh.NodeID, alive func(mesh.NodeID) bool,
	log *slog.Logger, shards int, prec shardapi.Precision) ([]shardClient, error) {
	resolve := mesh.ResolveFromMembership(members)
	out := make([]shardClient, 0, shards)
	for s := range shards {
		shard := uint32(s)
		cfg := shardapi.DefaultClientConfig(shard, clock.WorkerID(id), func() []mesh.NodeID { return candidates(shard) })
		cfg.Alive = alive
		cfg.Precision = prec
		c, err := shardapi.NewClient(cfg, tr, resolve, log)
		if err != nil {
			for _, c := range out {
				c.close()
			}
			return nil, err
		}
		out = append(out, shardClient{c})
	}
	return out, nil
}

// ShardClients wraps clients built elsewhere (the tests of node's push
// path) for [NewPushOnly].
func ShardClients(cs []*shardapi.Client) []shardClient {
	out := make([]shardClient, len(cs))
	for i, c := range cs {
		out[i] = shardClient{c}
	}
	return out
}

// push sends iteration iter of samples with payload (the encoded
// gradient), asking shard 0 for a round of want samples (Worker.want); with into nil it asks for no parameters (the worker keeps
// its slice), else the slice is decoded into into. The reply's counters
// are this push's, error or not.
func (sc shardClient) push(ctx context.Context, iter, samples, computeNs, want int64, payload []byte, into []float32) (shardapi.PushReply, error) {
	keep := into == nil
	rep, err := sc.c.Push(ctx, shardapi.Push{Iter: iter, Samples: samples, ComputeNs: computeNs, Want: want, Payload: payload, Keep: keep, Into: into})
	if err == nil && !keep && len(rep.Params) != len(into) {
		err = errors.New("shard returned a slice of the wrong length")
	}
	return rep, err
}

// residual is the int8 error-feedback residual of an n-parameter slice
// for a gradient of samples (nil in other precisions).
func (sc shardClient) residual(n int, samples int64) []byte { return sc.c.Residual(n, samples) }

// addWorker adds the worker to the shard at clock from or the shard's
// t_min, whichever is higher, and returns the clock it has there.
func (sc shardClient) addWorker(ctx context.Context, from int64) (int64, error) {
	return sc.c.AddWorker(ctx, from)
}

// removeWorker drops the worker from the shard's clock table.
func (sc shardClient) removeWorker(ctx context.Context) error { return sc.c.RemoveWorker(ctx) }

func (sc shardClient) close() { sc.c.Close() }
