package shards

import (
	"context"
	"dsspmesh/node/records"
	"testing"
	"time"
)

func TestShardsAtPlacement(t *testing.T) {
	sh := func(leader string, voters, place []string) records.ShardStatus {
		return records.ShardStatus{Leader: leader, Voters: voters, Placement: place}
	}
	abc, bca := []string{"a", "b", "c"}, []string{"b", "c", "a"}
	cases := []struct {
		name   string
		shards []records.ShardStatus
		want   bool
	}{
		{"placed, leaders spread, voters in another order", []records.ShardStatus{sh("a", abc, bca), sh("b", bca, abc), sh("c", abc, abc)}, true},
		{"no shards", nil, false},
		{"a shard without a leader", []records.ShardStatus{sh("", abc, abc)}, false},
		{"voters not yet placement (the bootstrap node alone)", []records.ShardStatus{sh("a", []string{"a"}, abc)}, false},
		{"a voter placement dropped still in", []records.ShardStatus{sh("a", []string{"a", "b", "c", "d"}, abc)}, false},
		{"leader outside placement", []records.ShardStatus{sh("d", abc, abc)}, false},
		{"one node leads them all: fine", []records.ShardStatus{sh("a", abc, abc), sh("a", abc, abc), sh("a", abc, abc)}, true},
	}
	for _, c := range cases {
		if got := shardsAtPlacement(c.shards); got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

// TestAwaitPlacement drives the wait with channels standing in for the
// poll ticker and the time limit.
func TestAwaitPlacement(t *testing.T) {
	tick, limit := make(chan time.Time), make(chan time.Time)
	checks := 0
	settled := func() bool { checks++; return checks == 3 }
	done := make(chan bool)
	go func() { done <- awaitPlacement(context.Background(), settled, tick, limit) }()
	tick <- time.Time{}
	tick <- time.Time{}
	if ok := <-done; !ok || checks != 3 {
		t.Fatalf("settled on the third check: ok %v after %d checks", ok, checks)
	}

	go func() { done <- awaitPlacement(context.Background(), func() bool { return false }, tick, limit) }()
	tick <- time.Time{}
	limit <- time.Time{}
	if ok := <-done; ok {
		t.Fatal("the time limit fired: want false")
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if awaitPlacement(ctx, func() bool { return false }, tick, limit) {
		t.Fatal("ctx ended: want false")
	}
}
