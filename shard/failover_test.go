package shard

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"dsspmesh/clock"
	"dsspmesh/mesh"
	"dsspmesh/shardapi"
)

// failoverSeeds is how many seeds TestFailoverKillLeader runs; the
// shardlong build tag raises it.
var failoverSeeds = 4

// TestFailoverKillLeader kills the leader mid-run for several seeds and
// checks: no acked push lost, none applied twice, clocks never go back,
// gap ≤ s_U, gate decisions as clock.Gate's, survivors identical, and the
// killed replica, restarted on its stores, catches up to the same state.
func TestFailoverKillLeader(t *testing.T) {
	var worst time.Duration
	for seed := 1; seed <= failoverSeeds; seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			worst = max(worst, failoverRun(t, uint64(seed)))
		})
		if t.Failed() {
			t.FailNow()
		}
	}
	t.Logf("%d seeds: worst time from leader kill to a new leader acking %s (election timeout 50ms)", failoverSeeds, worst)
}

func failoverRun(t *testing.T, seed uint64) time.Duration {
	const n, iters = 32, 30
	rng := rand.New(rand.NewPCG(seed, 99))
	c := newCluster(t, 6)
	ids := nodeIDs(3)
	spec := shardapi.Spec{Shard: 6, Len: n, Policy: "dssp:1:3", Optimizer: shardapi.DefaultOptimizer()}
	theta0 := gradFor("init", int64(seed), n)
	c.boot(ids, spec, theta0)
	killAt := int64(10 + rng.IntN(80))
	var acks atomic.Int64
	var killed mesh.NodeID
	var stall time.Duration
	served := make(chan struct{})
	var killing atomic.Bool
	onAck := func() {
		if acks.Add(1) != killAt {
			return
		}
		killed = c.waitLeader("").cfg.ID
		killing.Store(true)
		go func() {
			defer close(served)
			start := time.Now()
			c.kill(killed)
			// Served: a new leader has acknowledged a push.
			c.waitFor(10*time.Second, "a new leader serving", func() bool {
				for id, r := range c.live() {
					if id != killed && r.IsLeader() && r.Status().Service.Acked > 0 {
						return true
					}
				}
				return false
			})
			stall = time.Since(start)
		}()
	}
	acked := runWorkers(t, c, ids, []clock.WorkerID{"w1", "w2", "w3", "w4"}, iters, n, onAck)
	if !killing.Load() {
		t.Fatalf("seed %d: the leader was never killed: %d acks, the kill was due at the %dth", seed, acks.Load(), killAt)
	}
	<-served
	hash := c.waitSame()
	survivors := c.live()
	if len(survivors) != 2 {
		t.Fatalf("seed %d: %d survivors", seed, len(survivors))
	}
	for id := range survivors {
		applied, ref := replay(t, c.logs[id].snapshot(), spec, theta0)
		lost := 0
		for k := range acked {
			if !applied[k] {
				lost++
			}
		}
		if lost > 0 {
			t.Errorf("seed %d: %s lost %d acked pushes", seed, id, lost)
		}
		if got := survivors[id].FSM().Params(nil); !equalFloats(got, ref) {
			t.Errorf("seed %d: %s parameters differ from the serial replay", seed, id)
		}
	}
	// The killed replica comes back on its stores and catches up.
	c.start(killed)
	if got := c.waitSame(); got != hash {
		t.Errorf("seed %d: restarted %s converged to another state", seed, killed)
	}
	t.Logf("seed %d: killed leader %s after %d acks; a new leader acked after %s; %d acked", seed, killed, killAt, stall, len(acked))
	return stall
}

func equalFloats(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
