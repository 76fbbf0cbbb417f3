package shard

import (
	"fmt"

	"dsspmesh/shardapi"
)

// checkPush is the one validation of a push's fields and length, run by
// the leader's service before it proposes a push and by every replica's
// FSM as it applies one, alone or in a summed group: a worker named, no
// negative iteration, samples or compute time ([shardapi.ReasonBadRequest]),
// and a gradient of the shard's n values in prec
// ([shardapi.ReasonBadLength]). grad is the length of the push's encoded
// gradient; n ≤ 0 skips the length: on a leader whose FSM has no Init yet
// (the FSM refuses the push as not initialised when it applies it), and
// for a push of a summed group, whose gradient is in the group's sum.
//
// Non-finite values are refused where the gradient is read (the leader's
// hygiene scan, the FSM's decode), with [shardapi.ReasonNonFinite] at both.
func checkPush(m shardapi.PushMeta, grad, n int, prec shardapi.Precision) (shardapi.Reason, string) {
	switch {
	case m.Worker == "" || m.Iter < 0 || m.Samples < 0 || m.ComputeNs < 0:
		return shardapi.ReasonBadRequest, fmt.Sprintf("worker %q, iter %d, samples %d, compute %d ns", m.Worker, m.Iter, m.Samples, m.ComputeNs)
	case n > 0 && grad != prec.Bytes(n):
		return shardapi.ReasonBadLength, fmt.Sprintf("%d gradient bytes, the shard has %d parameters in %s (%d bytes)", grad, n, prec, prec.Bytes(n))
	}
	return 0, ""
}
