package shard

import (
	"context"
	"slices"
	"testing"
	"time"

	"dsspmesh/mesh"
)

// TestLeadershipEvents: LeaderChanged wakes a waiter when its replica is
// elected, OnLeader reports each term once and only on the replica that
// leads it, and after the leader is killed and another elected the new
// term is higher and the configuration still names all three voters.
func TestLeadershipEvents(t *testing.T) {
	c := newCluster(t, 3)
	ids := nodeIDs(3)
	for _, id := range ids {
		c.start(id)
	}
	if err := c.replica(ids[0]).Bootstrap(ids); err != nil {
		t.Fatal(err)
	}
	first := awaitLeader(t, c, ids, "")
	if err := c.replica(first).TransferLeadership(""); err != nil {
		t.Fatal(err)
	}
	second := awaitLeader(t, c, ids, first)
	conf, err := c.replica(second).Configuration()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(conf.Voters)
	if !slices.Equal(conf.Voters, ids) || len(conf.Nonvoters) != 0 || !conf.Has(first) {
		t.Fatalf("configuration %+v, want voters %v", conf, ids)
	}
	// Named: the one voter that is neither of the two leaders so far.
	var third mesh.NodeID
	for _, id := range ids {
		if id != first && id != second {
			third = id
		}
	}
	if err := c.replica(second).TransferLeadership(third); err != nil {
		t.Fatal(err)
	}
	if got := awaitLeader(t, c, ids, second); got != third {
		t.Fatalf("leadership went to %s, want %s, named", got, third)
	}

	byTerm := map[uint64]mesh.NodeID{}
	for _, id := range ids {
		for _, term := range c.logs[id].ledTerms() {
			if other, ok := byTerm[term]; ok {
				t.Fatalf("term %d reported by %s and %s", term, other, id)
			}
			byTerm[term] = id
		}
	}
	t1, t2 := leadTerm(byTerm, first), leadTerm(byTerm, second)
	if t1 == 0 || t2 <= t1 {
		t.Fatalf("terms reported %v: %s led %d, then %s led %d", byTerm, first, t1, second, t2)
	}
}

// awaitLeader waits on every replica's LeaderChanged until one other than
// not leads and has reported it to OnLeader (which happens before the
// waiters of that observation wake), and returns it.
func awaitLeader(t *testing.T, c *cluster, ids []mesh.NodeID, not mesh.NodeID) mesh.NodeID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		woke := make(chan struct{}, len(ids))
		for _, id := range ids {
			ch := c.replica(id).LeaderChanged()
			go func() {
				select {
				case <-ch:
					woke <- struct{}{}
				case <-ctx.Done():
				}
			}()
		}
		for _, id := range ids {
			if id != not && c.replica(id).IsLeader() && len(c.logs[id].ledTerms()) > 0 {
				return id
			}
		}
		select {
		case <-woke:
		case <-ctx.Done():
			t.Fatalf("no leader other than %q within 10s", not)
		}
	}
}

func leadTerm(byTerm map[uint64]mesh.NodeID, id mesh.NodeID) uint64 {
	var last uint64
	for term, who := range byTerm {
		if who == id && term > last {
			last = term
		}
	}
	return last
}
