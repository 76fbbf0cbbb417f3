package shard

import (
	"strings"
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

// TestForRTT: a round trip within the default lease ÷ RTTLeaseFactor
// changes nothing; a 300 ms one gets a 1.2 s lease and 2.4 s heartbeat and
// election timeouts, and the result stays valid.
func TestForRTT(t *testing.T) {
	def := DefaultConfig(1, "node-a")
	for _, rtt := range []time.Duration{0, time.Millisecond, 51 * time.Millisecond, def.LeaderLeaseTimeout / RTTLeaseFactor} {
		if got := def.ForRTT(rtt); got != def {
			t.Errorf("ForRTT(%v) changed the default timing: %+v", rtt, got)
		}
	}
	got := def.ForRTT(300 * time.Millisecond)
	if got.LeaderLeaseTimeout != 1200*time.Millisecond || got.HeartbeatTimeout != 2400*time.Millisecond || got.ElectionTimeout != 2400*time.Millisecond {
		t.Errorf("ForRTT(300ms): lease %v, heartbeat %v, election %v", got.LeaderLeaseTimeout, got.HeartbeatTimeout, got.ElectionTimeout)
	}
	if err := got.Validate(); err != nil {
		t.Error(err)
	}
}

// TestForEntryBytes: a 100 MB model's 6.25 MB entries stretch raft's
// timers about 6× and send 2 entries an RPC; small entries change nothing;
// the stretch stops at MaxEntryStretch and the result stays valid.
func TestForEntryBytes(t *testing.T) {
	def := DefaultConfig(1, "n1")
	if got := def.ForEntryBytes(256 << 10); got != def {
		t.Errorf("256 KiB entries changed the config: %+v", got)
	}
	big := def.ForEntryBytes(6_225_000)
	f := float64(big.HeartbeatTimeout) / float64(def.HeartbeatTimeout)
	if f < 5.5 || f > 6.5 || big.MaxAppendEntries != 2 {
		t.Errorf("6.2 MB entries: heartbeat ×%.2f, MaxAppendEntries %d; want ≈ ×5.9, 2", f, big.MaxAppendEntries)
	}
	huge := def.ForEntryBytes(1 << 30)
	if huge.HeartbeatTimeout != MaxEntryStretch*def.HeartbeatTimeout || huge.MaxAppendEntries != 2 {
		t.Errorf("1 GiB entries: heartbeat %v, MaxAppendEntries %d", huge.HeartbeatTimeout, huge.MaxAppendEntries)
	}
	for _, c := range []Config{big, huge, def.ForGroups(64).ForEntryBytes(1 << 30)} {
		if err := c.Validate(); err != nil {
			t.Error(err)
		}
	}
}

// TestValidateNamesABadBatchLinger: a negative or over-long linger is
// refused with its value; 0 (propose at once) is valid.
func TestValidateNamesABadBatchLinger(t *testing.T) {
	for _, d := range []time.Duration{-time.Millisecond, 2 * time.Second} {
		c := DefaultConfig(0, "n1")
		c.BatchLinger = d
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "BatchLinger ("+d.String()+")") {
			t.Errorf("BatchLinger %v: %v", d, err)
		}
	}
	c := DefaultConfig(0, "n1")
	c.BatchLinger = 0
	if err := c.Validate(); err != nil {
		t.Errorf("BatchLinger 0: %v", err)
	}
}
