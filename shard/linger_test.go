package shard

import (
	"context"
	"testing"
	"time"

	"dsspmesh/clock"
	"dsspmesh/mesh"
	"dsspmesh/shardapi"
)

// lingerClock hands the proposer a linger timer the test fires, and says
// when one is armed.
type lingerClock struct {
	SystemClock
	armed chan struct{}
	fire  chan time.Time
}

func (l lingerClock) After(time.Duration) <-chan time.Time {
	l.armed <- struct{}{}
	return l.fire
}

// TestBatchLingerWaitsForEveryWorker: a push that finds the queue empty
// waits (on the injected clock) for the shard's other workers, their
// pushes share its entry, and a lone push goes when the linger ends.
func TestBatchLingerWaitsForEveryWorker(t *testing.T) {
	const n = 8
	c := newCluster(t, 7)
	lc := lingerClock{armed: make(chan struct{}, 1), fire: make(chan time.Time, 1)}
	c.clock = lc
	c.cfg = func(id mesh.NodeID) Config {
		cfg := fastConfig(7, id)
		cfg.BatchLinger = time.Second // never reached: the test fires it
		return cfg
	}
	ids := c.bootZeros(1, n, "asp")
	leader := c.waitLeader("")
	workers := []clock.WorkerID{"a", "b", "c"}
	clients := map[clock.WorkerID]*shardapi.Client{}
	for _, w := range workers {
		cl := c.client(w, ids)
		if _, err := cl.AddWorker(context.Background(), 0); err != nil {
			t.Fatal(err)
		}
		clients[w] = cl
	}
	push := func(w clock.WorkerID, iter int64) chan error {
		done := make(chan error, 1)
		go func() {
			_, err := clients[w].Push(context.Background(), shardapi.Push{Iter: iter, Samples: 1, ComputeNs: 1, Payload: clients[w].Encode(gradFor(w, iter, n), 1)})
			done <- err
		}()
		return done
	}
	wait := func(done chan error) {
		t.Helper()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("push not answered in 10 s")
		}
	}

	armed := func() {
		t.Helper()
		select {
		case <-lc.armed:
		case <-time.After(10 * time.Second):
			t.Fatal("the proposer armed no linger in 10 s")
		}
	}
	first := push("a", 0)
	armed()
	if got := leader.Status().Service.Batches; got != 0 {
		t.Fatalf("a lingering push was proposed: %d batches", got)
	}
	rest := []chan error{push("b", 0), push("c", 0)}
	for _, d := range append(rest, first) {
		wait(d)
	}
	if st := leader.Status().Service; st.Batches != 1 || st.ProposedPushes != 3 {
		t.Fatalf("three workers' pushes went in %d entries (%d pushes); want one entry", st.Batches, st.ProposedPushes)
	}

	lone := push("a", 1)
	armed()
	lc.fire <- time.Time{}
	wait(lone)
	if st := leader.Status().Service; st.Batches != 2 || st.ProposedPushes != 4 {
		t.Fatalf("after the linger: %d entries, %d pushes; want 2, 4", st.Batches, st.ProposedPushes)
	}
}
