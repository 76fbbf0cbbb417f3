package shardapi

import "context"

// PushKeep is [Client.Push] for a worker that keeps its copy of the shard's
// slice because that copy is fresh enough for its next iteration
// (docs/design.md, "The read guarantee"): the request says Keep, and the OK
// carries no parameters. It returns the version the shard was at when it
// released the push (not the caller's copy's: that keeps its own). Errors
// and resends are Push's.
func (c *Client) PushKeep(ctx context.Context, iter, samples, computeNs int64, grad []float32) (Version, error) {
	c.buf = c.cfg.Precision.AppendFeedback(c.buf[:0], grad, c.Residual(len(grad), samples))
	return c.PushKeepEncoded(ctx, iter, samples, computeNs, c.buf)
}

// PushKeepEncoded is PushKeep with the gradient already encoded, as
// [Client.PushEncoded] takes it.
func (c *Client) PushKeepEncoded(ctx context.Context, iter, samples, computeNs int64, payload []byte) (Version, error) {
	meta := PushMeta{PushID: PushID{Worker: c.cfg.Worker, Iter: iter}, Samples: samples, ComputeNs: computeNs}
	rep, err := c.call(ctx, Request{Op: OpPush, PushMeta: meta, Keep: true}, payload, nil)
	if err != nil {
		return Version{}, err
	}
	if rep.Assign != nil {
		c.Assign, c.Ahead = rep.Assign, rep.Ahead
	}
	return Version{Index: rep.Index, Min: rep.Clock}, nil
}
