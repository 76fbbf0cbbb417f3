package shards

import (
	"slices"
	"testing"
	"time"

	"dsspmesh/mesh"
)

// TestNeedsRetiming: a replica opened knowing no round trip is reopened
// once its voters lie 300 ms away (the default lease cannot hold a quorum
// there), not for a 51 ms round trip the default lease holds, and not again
// for one that drifts a little past what it opened with.
func TestNeedsRetiming(t *testing.T) {
	for _, tc := range []struct {
		now, opened time.Duration
		want        bool
	}{
		{300 * time.Millisecond, 0, true},
		{51 * time.Millisecond, 0, false},
		{defaultLease / rttLeaseFactor, 0, false},
		{310 * time.Millisecond, 300 * time.Millisecond, false},
		{600 * time.Millisecond, 300 * time.Millisecond, true},
	} {
		if got := needsRetiming(tc.now, tc.opened); got != tc.want {
			t.Errorf("needsRetiming(%v, %v) = %v, want %v", tc.now, tc.opened, got, tc.want)
		}
	}
}

// TestNearestFirst: reconcile adds replicas nearest first, the unmeasured
// last in placement's order.
func TestNearestFirst(t *testing.T) {
	rtt := map[mesh.NodeID]time.Duration{"near": 200 * time.Microsecond, "far": 300 * time.Millisecond}
	m := &Manager{d: Deps{ID: "self", RTT: func(a, b mesh.NodeID) (time.Duration, bool) {
		if a == b {
			return 0, true
		}
		d, ok := rtt[b]
		return d, ok
	}}}
	got := m.nearestFirst([]mesh.NodeID{"far", "unknown", "self", "near"})
	if want := []mesh.NodeID{"self", "near", "far", "unknown"}; !slices.Equal(got, want) {
		t.Errorf("nearestFirst = %v, want %v", got, want)
	}
}
