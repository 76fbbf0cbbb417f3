package node

import (
	"context"
	"testing"
	"time"
)

func TestShardsAtPlacement(t *testing.T) {
	sh := func(leader string, voters, place []string) ShardStatus {
		return ShardStatus{Leader: leader, Voters: voters, Placement: place}
	}
	abc, bca := []string{"a", "b", "c"}, []string{"b", "c", "a"}
	cases := []struct {
		name   string
		shards []ShardStatus
		nodes  int
		want   bool
	}{
		{"placed, leaders spread, voters in another order", []ShardStatus{sh("a", abc, bca), sh("b", bca, abc), sh("c", abc, abc)}, 3, true},
		{"no shards", nil, 3, false},
		{"a shard without a leader", []ShardStatus{sh("", abc, abc)}, 3, false},
		{"voters not yet placement (the bootstrap node alone)", []ShardStatus{sh("a", []string{"a"}, abc)}, 3, false},
		{"a voter placement dropped still in", []ShardStatus{sh("a", []string{"a", "b", "c", "d"}, abc)}, 4, false},
		{"leader outside placement", []ShardStatus{sh("d", abc, abc)}, 4, false},
		{"one node leads more than its share", []ShardStatus{sh("a", abc, abc), sh("a", abc, abc), sh("b", abc, abc)}, 3, false},
		{"share rounds up: 2 of 3 shards on 2 nodes", []ShardStatus{sh("a", abc, abc), sh("a", abc, abc), sh("b", abc, abc)}, 2, true},
	}
	for _, c := range cases {
		if got := shardsAtPlacement(c.shards, c.nodes); got != c.want {
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
