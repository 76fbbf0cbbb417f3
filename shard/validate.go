package shard

import (
	"fmt"
	"math"

	"dsspmesh/shardapi"
)

// checkPush is the one validation of a push's fields and length, run by
// the leader's intake before it proposes a push and by every replica as
// it applies one, alone or in a summed group (docs/design.md, "Bounds and
// the outlier rule"): a worker named and no negative field
// (ReasonBadRequest), the job's bounds (ReasonOutOfBounds), a gradient of
// the shard's n values in spec.Precision (ReasonBadLength; n ≤ 0 skips
// it: before Init, and for a push of a summed group).
func checkPush(m shardapi.PushMeta, grad, n int, spec shardapi.Spec) (shardapi.Reason, string) {
	switch {
	case m.Worker == "" || m.Iter < 0 || m.Samples < 0 || m.ComputeNs < 0:
		return shardapi.ReasonBadRequest, fmt.Sprintf("worker %q, iter %d, samples %d, compute %d ns", m.Worker, m.Iter, m.Samples, m.ComputeNs)
	case m.Want < 0:
		return shardapi.ReasonBadRequest, fmt.Sprintf("a round of %d samples asked", m.Want)
	case m.Iter > shardapi.MaxIter:
		return shardapi.ReasonOutOfBounds, fmt.Sprintf("iteration %d above the bound %d", m.Iter, int64(shardapi.MaxIter))
	case m.Samples > spec.MaxPushSamples():
		return shardapi.ReasonOutOfBounds, fmt.Sprintf("%d samples above the job's bound %d a push", m.Samples, spec.MaxPushSamples())
	case m.Want > spec.MaxPushSamples():
		return shardapi.ReasonOutOfBounds, fmt.Sprintf("a round of %d samples asked, above the job's bound %d", m.Want, spec.MaxPushSamples())
	case m.ComputeNs > shardapi.MaxComputeNs:
		return shardapi.ReasonOutOfBounds, fmt.Sprintf("compute time %d ns above the bound %d ns", m.ComputeNs, shardapi.MaxComputeNs)
	case n > 0 && grad != spec.Precision.Bytes(n):
		return shardapi.ReasonBadLength, fmt.Sprintf("%d gradient bytes, the shard has %d parameters in %s (%d bytes)", grad, n, spec.Precision, spec.Precision.Bytes(n))
	}
	return 0, ""
}

// checkZeroSamples refuses a push of no samples whose gradient (decoded,
// or its squared norm sq) is not zero: such a push is a fetch (a join's,
// or a worker re-added ahead of its gradient) and carries zeros; a
// gradient with no samples behind it would otherwise be applied outside
// every bound that depends on samples.
func checkZeroSamples(samples int64, sq float64) (shardapi.Reason, string) {
	if samples == 0 && sq != 0 {
		return shardapi.ReasonOutOfBounds, fmt.Sprintf("a push of no samples carries a gradient of norm %.4g", math.Sqrt(sq))
	}
	return 0, ""
}
