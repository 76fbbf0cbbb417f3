package shards

import (
	"strings"
	"sync"
	"testing"
	"time"

	"dsspmesh/shardapi"
)

// TestHealTimeline: an empty replica's timeline says when it opened, when
// the leader's snapshot was restored (its bytes and the rate since
// opening, timed by the restore, not by the tick that saw it)
// and when it was caught up (a voter that applied the commit index it
// knows), each once, and a replica that goes away ends its timeline.
func TestHealTimeline(t *testing.T) {
	var mu sync.Mutex
	var got []string
	opened := make(chan struct{}, 2)
	h := newHeals(func(shard uint32, detail string) {
		mu.Lock()
		got = append(got, detail)
		mu.Unlock()
		if strings.HasPrefix(detail, "replica opened") {
			opened <- struct{}{}
		}
	})
	t0 := time.Unix(1000, 0)
	h.note(0, t0)
	h.note(1, t0)
	<-opened
	<-opened
	var rs shardapi.ReplicaStatus
	votes, present := false, true
	view := func(id uint32) (shardapi.ReplicaStatus, bool, bool) {
		if id == 1 {
			return shardapi.ReplicaStatus{}, false, false // gone
		}
		return rs, votes, present
	}
	h.follow(t0.Add(300*time.Millisecond), view)                                                   // nothing yet
	rs.Restored = shardapi.Restores{Count: 1, Bytes: 8 << 20, At: t0.Add(1500 * time.Millisecond)} // seen at the next tick
	rs.AppliedIndex, rs.CommitIndex, rs.Spec.Len = 40, 90, 1<<20
	h.follow(t0.Add(2*time.Second), view)
	h.follow(t0.Add(2300*time.Millisecond), view) // received once only
	rs.AppliedIndex = 90
	h.follow(t0.Add(2600*time.Millisecond), view) // not a voter yet
	votes = true
	h.follow(t0.Add(3*time.Second), view)
	h.follow(t0.Add(4*time.Second), view) // done: nothing more
	mu.Lock()
	defer mu.Unlock()
	want := []string{
		"replica opened empty",
		"replica opened empty",
		"state received: a snapshot of 8.0 MiB, restored 1.5s after the replica opened (5.3 MiB/s)",
		"caught up: a voter at index 90, applied after the snapshot, 3s after the replica opened; its slice 4.0 MiB of parameters",
	}
	if len(got) != len(want) {
		t.Fatalf("events %q, want %d", got, len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Fatalf("event %d: %q, want %q", i, got[i], want[i])
		}
	}
	if len(h.on) != 0 {
		t.Fatalf("timelines left: %v", h.on)
	}
}
