//go:build chaos

package test

import (
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"dsspmesh/lab/netlab"
)

// TestChaosSites is the long tier's goodput on the link lab's two sites
// (2 × 2 hosts, 1 Gbit/s within a site, 100 Mbit/s and 25 ms one way
// between them): the same job runs twice, on a fresh lab each time, for
// DSSP_CHAOS_DURATION (default 10m) — first without faults, then with the
// suite's faults that the lab can make (kill -9 of a leader, of a worker,
// of a node then restarted, SIGSTOP of a leader, a rolling restart, every
// node killed, and the link between the sites cut for 5–30 s), seeded by
// DSSP_CHAOS_SEED (default 1). Goodput is the samples of the pushes shard
// 0 acknowledged per second over the run (the nodes' history); the test
// prints the faulty run's ÷ the fault-free run's, and fails on a checker,
// a crash or a stall. The job is the fault suite's at --local-steps 16
// (DSSP_FAULT_JOB_FLAGS adds to it). It needs root.
//
//	go test -tags chaos ./test -run TestChaosSites -timeout 40m -v
func TestChaosSites(t *testing.T) {
	netlab.Require(t)
	dur := envDuration(t, "DSSP_CHAOS_DURATION", 10*time.Minute)
	seed := chaosSeed(t)
	var rates [2]float64
	for run, faults := range []bool{false, true} {
		name := map[bool]string{false: "fault-free", true: "faults"}[faults]
		t.Run(name, func(t *testing.T) {
			rates[run] = sitesRun(t, dur, seed, faults)
		})
	}
	if rates[0] > 0 {
		t.Logf("goodput: %.0f samples/s with faults ÷ %.0f without = %.3f (target ≥ 0.88)", rates[1], rates[0], rates[1]/rates[0])
	}
}

// sitesRun runs the job on a fresh two-site lab for dur, with faults or
// without, checks the history and returns the goodput.
func sitesRun(t *testing.T, dur time.Duration, seed uint64, faults bool) float64 {
	const limit = 4 * time.Minute
	lab := startLab(t, netlab.Presets["two-sites"])
	spec := append([]string{"--model", "mlp", "--paradigm", "dssp", "--s-lower", "3", "--r-max", "12", "--shards", "4", "--local-steps", "16"},
		strings.Fields(os.Getenv("DSSP_FAULT_JOB_FLAGS"))...)
	c := NewFaultCluster(t, FaultOptions{Nodes: 4, Lab: lab, Policy: "dssp:3:12", Seed: seed,
		Args: []string{"--threads", "1", "--eval-every", "3s", "--eval-samples", "1000", "--log-level", faultLogLevel()},
		Spec: spec})
	for i := range c.Mesh.Procs {
		c.Start(i)
	}
	crashes := c.ReplaceCrashed()
	stalls := c.RecoverStalls()
	c.WaitHealthy("warm-up", 10, limit)
	rng := rand.New(rand.NewPCG(seed, 77))
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo))) }
	start := time.Now()
	var events []Event
	for time.Since(start) < dur {
		if !faults {
			c.holdUntil(start.Add(dur))
			continue
		}
		first := len(events)
		switch kind := rng.IntN(100); {
		case kind < 15:
			events = append(events, c.KillLeader(limit))
		case kind < 27:
			events = append(events, c.KillWorker(limit))
		case kind < 40:
			events = append(events, c.KillRestart(limit))
		case kind < 55:
			events = append(events, c.PauseLeader(between(time.Second, 8*time.Second), limit))
		case kind < 90:
			events = append(events, c.CutSite(rng.IntN(2), between(5*time.Second, 30*time.Second), limit))
		case kind < 95:
			events = append(events, c.RollingRestart(limit)...)
		default:
			events = append(events, c.KillAll(limit))
		}
		for _, e := range events[first:] {
			logFault(t, start, e)
		}
		c.holdUntil(time.Now().Add(between(3*time.Second, 10*time.Second)))
	}
	end := time.Now()
	c.WaitHealthy("the end", 3, limit)
	if faults && len(events) == 0 {
		t.Fatal("no fault injected")
	}
	report(t, c, events)
	h, err := ReadHistory(c.HistoryDir)
	if err != nil {
		t.Fatal(err)
	}
	var samples int64
	for _, r := range h.Records {
		if r.Kind == "ok" && r.Shard == 0 && r.Nanos >= start.UnixNano() && r.Nanos < end.UnixNano() {
			samples += r.Samples
		}
	}
	rate := float64(samples) / end.Sub(start).Seconds()
	acc := 0.0
	if a := Accuracy(c.Statuses()); a != nil {
		acc = a.Accuracy
	}
	t.Logf("%d faults in %v: %d samples acknowledged by shard 0, %.0f samples/s; accuracy %.3f", len(events),
		end.Sub(start).Round(time.Second), samples, rate, acc)
	failures(t, c, *crashes, *stalls)
	return rate
}
