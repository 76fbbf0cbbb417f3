package shard

import (
	"testing"
	"time"
)

func TestForGroupsStretchesOnlyDenseNodesAndStaysValid(t *testing.T) {
	base := DefaultConfig(0, "node-a")
	for _, tc := range []struct {
		groups  int
		stretch float64
	}{{0, 1}, {1, 1}, {GroupsAtDefaultTiming, 1}, {2 * GroupsAtDefaultTiming, 2}, {48, 3}, {1000, MaxTimerStretch}} {
		c := base.ForGroups(tc.groups)
		want := time.Duration(float64(base.HeartbeatTimeout) * tc.stretch)
		if c.HeartbeatTimeout != want || c.CommitTimeout != time.Duration(float64(base.CommitTimeout)*tc.stretch) || c.ElectionTimeout < c.HeartbeatTimeout || c.LeaderLeaseTimeout > c.HeartbeatTimeout {
			t.Errorf("%d groups: heartbeat %v (want %v), election %v, lease %v", tc.groups, c.HeartbeatTimeout, want, c.ElectionTimeout, c.LeaderLeaseTimeout)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("%d groups: %v", tc.groups, err)
		}
	}
}
