package eval

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"dsspmesh/node/records"
	"dsspmesh/shardapi"
)

// The evaluator records each claim in shard 0 (shardapi.OpClaim;
// shard/claims.go) before it serves the model it scored or sends the
// claim to anyone: shard 0 records it only while the lease names this
// node, and one digest per sequence. A node forwarding the evaluated
// model checks the claim that comes with it against the recorded one
// (Room.recorded), so the evaluator cannot serve a file its recorded
// claim does not name, even with a claim it signed.

// errUnrecorded: a claim an evaluator sent is not the one shard 0
// recorded for its sequence, or none is recorded.
var errUnrecorded = errors.New("not the claim recorded")

// recordTimeout bounds the recording of one claim: a commit in shard 0,
// retried across a leader change.
const recordTimeout = 10 * time.Second

// claimOf is e as shard 0 records it.
func claimOf(e records.EvalResult) shardapi.Claim {
	return shardapi.Claim{By: e.By, Seq: e.Seq, Iter: e.Iter, Accuracy: e.Accuracy, Loss: e.Loss, Samples: int64(max(e.Samples, 0)), Digest: e.Digest}
}

// record records this node's claim e in shard 0.
func (r *Room) record(ctx context.Context, e records.EvalResult) error {
	if e.Digest == "" {
		return errors.New("the claim has no digest of the evaluated model")
	}
	ctx, cancel := context.WithTimeout(ctx, recordTimeout)
	defer cancel()
	return r.book(ctx, func(b ClaimBook) error { return b.Claim(ctx, claimOf(e)) })
}

// book runs fn with Deps.Book, or the room's client of shard 0 in the
// read turn.
func (r *Room) book(ctx context.Context, fn func(b ClaimBook) error) error {
	if r.d.Book != nil {
		return fn(r.d.Book)
	}
	job, ok := r.d.Job()
	if !ok {
		return errors.New("the node has not joined the mesh's shards yet")
	}
	return r.reader.shard0(ctx, r.d, job, func(c *shardapi.Client) error { return fn(c) })
}

// recorded finds e, a claim an evaluator sent with its evaluated model,
// among those shard 0 recorded, and refuses it when shard 0 recorded
// none for its evaluator and sequence, or another digest or accuracy.
func (r *Room) recorded(ctx context.Context, e records.EvalResult) (shardapi.Claim, error) {
	var recs []shardapi.Claim
	err := r.book(ctx, func(b ClaimBook) (err error) { recs, err = b.Claims(ctx); return err })
	if err != nil {
		return shardapi.Claim{}, fmt.Errorf("shard 0's recorded claims: %w", err)
	}
	for _, c := range recs {
		if c.By != e.By || c.Seq != e.Seq {
			continue
		}
		if c.Digest != e.Digest || !math.IsNaN(c.Accuracy) && c.Accuracy != e.Accuracy {
			return c, fmt.Errorf("%w: shard 0 recorded its claim of sequence %d with digest %s and accuracy %v (index %d), not %s and %v",
				errUnrecorded, c.Seq, c.Digest, c.Accuracy, c.Index, e.Digest, e.Accuracy)
		}
		return c, nil
	}
	return shardapi.Claim{}, fmt.Errorf("%w: shard 0 recorded no claim of %s at sequence %d (%d claims recorded)", errUnrecorded, e.By, e.Seq, len(recs))
}
