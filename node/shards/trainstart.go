package shards

import (
	"context"
	"slices"
	"time"

	"dsspmesh/node/records"
)

// Training waits for placement when slices are large. A fresh mesh's
// bootstrap node hosts and leads every shard until placement has moved
// each to its replicas (a snapshot per new replica: 25 MB per shard of a
// 100 MB model) and handed leadership around (manager.go). A worker that
// pushed from the start sent every push of every worker to that one node:
// in dssp-lab bench bigmodel its queued pushes (~170 MB), the replies it
// encoded and its collector took the CPU the snapshots needed, the moves
// took minutes, leaders lost their lease, and the mesh completed 0–4
// iterations in 2 minutes. So when a shard's slice exceeds
// largeSliceBytes, the worker and
// the evaluation loop start once every shard has a leader in its placement
// and its voters are its placement — or after placementWait, whatever the
// mesh looks like then. Leaders go on spreading meanwhile (manager.go); the
// wait does not ask for that too (a leadership transfer can be refused for
// a while, and the moves are what cost). Smaller slices start at once, as
// before.
const placementWait = 3 * time.Minute

// largeSliceBytes is the slice (in the wire precision) beyond which
// training waits for placement.
const largeSliceBytes = 1 << 20

// largeSlices reports whether the job's slices exceed largeSliceBytes.
func (m *Manager) largeSlices() bool {
	return len(m.bounds) > 0 && m.cfg.Spec.Precision.Bytes(m.bounds[0][1]-m.bounds[0][0]) > largeSliceBytes
}

// placementPoll is how often the wait looks at the mesh.
const placementPoll = time.Second

// shardsAtPlacement reports whether every shard in shards has a leader
// in its placement and its voters are its placement (in any order).
func shardsAtPlacement(shards []records.ShardStatus) bool {
	if len(shards) == 0 {
		return false
	}
	for _, s := range shards {
		if s.Leader == "" || len(s.Placement) == 0 || !slices.Contains(s.Placement, s.Leader) || !sameStrings(s.Voters, s.Placement) {
			return false
		}
	}
	return true
}

func sameStrings(a, b []string) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(x string) bool { return !slices.Contains(b, x) })
}

// awaitPlacement returns once settled() holds, polling on tick, or when
// timeout fires (false: it did not settle) or ctx ends (false).
func awaitPlacement(ctx context.Context, settled func() bool, tick, timeout <-chan time.Time) bool {
	for {
		if settled() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-timeout:
			return false
		case <-tick:
		}
	}
}

// WaitForPlacement is awaitPlacement on shards (this node's view of the
// mesh), for a job whose slices are large; it logs how long it waited.
func (m *Manager) WaitForPlacement(ctx context.Context, shards func() []records.ShardStatus) {
	if !m.largeSlices() {
		return
	}
	start := time.Now()
	m.d.Logger.Info("waiting for the shards to reach their placement before training", "at_most", placementWait)
	poll := time.NewTicker(placementPoll)
	defer poll.Stop()
	limit := time.NewTimer(placementWait)
	defer limit.Stop()
	ok := awaitPlacement(ctx, func() bool {
		return shardsAtPlacement(shards())
	}, poll.C, limit.C)
	if ctx.Err() != nil {
		return
	}
	if ok {
		m.d.Logger.Info("shards at their placement: training starts", "waited", time.Since(start).Round(time.Millisecond))
	} else {
		m.d.Logger.Warn("shards not at their placement yet: training starts anyway", "waited", time.Since(start).Round(time.Millisecond))
	}
}
