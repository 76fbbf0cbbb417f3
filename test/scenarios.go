package test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"dsspmesh/mesh"
	"dsspmesh/node/launch"
	"dsspmesh/node/records"
	"dsspmesh/node/status"
)

// The scenarios below each start from a healthy mesh (every node up, in
// everyone's membership, every shard led, every worker training), inject
// one fault, measure, lift it and wait until the mesh is healthy again.
// Limits are generous: CI machines are small and shared.

// Trainers are the nodes that run a worker.
func (c *FaultCluster) Trainers() []int {
	var out []int
	for i := range c.Mesh.Procs {
		if !slices.Contains(c.replicaOnly, i) {
			out = append(out, i)
		}
	}
	return out
}

func (c *FaultCluster) all() []int {
	out := make([]int, len(c.Mesh.Procs))
	for i := range out {
		out[i] = i
	}
	return out
}

func without(nodes []int, drop ...int) []int {
	var out []int
	for _, i := range nodes {
		if !slices.Contains(drop, i) {
			out = append(out, i)
		}
	}
	return out
}

// WaitHealthy waits until every node is up, sees every other, every shard
// is led by a full replica set, and every worker advanced by n iterations.
// A shard still growing to its replica set (a young mesh, a node back from
// the dead) passes through two voters, which survive no loss: a fault
// injected then stalls it by design, not by a bug.
func (c *FaultCluster) WaitHealthy(what string, n int64, limit time.Duration) time.Duration {
	c.t.Helper()
	all := c.all()
	prog := c.progressed(c.Trainers(), n)
	return c.WaitFor(what+": mesh healthy", limit, func() bool {
		c.refreshIDs()
		for _, i := range all {
			if !c.membersAre(i, all) {
				return false
			}
		}
		return c.ledBy(all, all) && c.fullyReplicated(all, min(3, len(all))) && prog()
	})
}

// mostLeading is the node leading the most shards (ties: the lowest index).
func (c *FaultCluster) mostLeading() int {
	counts := c.LeaderCounts()
	best := -1
	for i := range c.Mesh.Procs {
		if best < 0 || counts[i] > counts[best] {
			best = i
		}
	}
	return best
}

// idleTrainer is a worker node that leads no shard (ties: the highest
// index), or -1.
func (c *FaultCluster) idleTrainer() int {
	counts := c.LeaderCounts()
	for _, i := range slices.Backward(c.Trainers()) {
		if counts[i] == 0 {
			return i
		}
	}
	return -1
}

// afterDeath measures detection, election and recovery after victims died
// or were cut off.
func (c *FaultCluster) afterDeath(e *Event, survivors []int, limit time.Duration) {
	c.t.Helper()
	conds := map[string]func() bool{
		"detect": func() bool {
			for _, i := range survivors {
				if !c.membersAre(i, survivors) {
					return false
				}
			}
			return true
		},
		"elect":   func() bool { return c.ledBy(survivors, survivors) },
		"recover": c.progressed(intersect(c.Trainers(), survivors), 5),
	}
	got := c.measure(e.Kind+": survivors detect, elect and train on", limit, conds)
	e.Detect, e.Elect, e.Recover = got["detect"], got["elect"], got["recover"]
}

func intersect(a, b []int) []int {
	var out []int
	for _, i := range a {
		if slices.Contains(b, i) {
			out = append(out, i)
		}
	}
	return out
}

// KillLeader kills the node leading most shards with SIGKILL, waits for the
// survivors to take over, and restarts it on its data dir.
func (c *FaultCluster) KillLeader(limit time.Duration) Event {
	c.t.Helper()
	return c.killThenRestart("kill leader", c.mostLeading(), limit)
}

// KillWorker kills a worker node that leads no shard and restarts it after
// the survivors moved on.
func (c *FaultCluster) KillWorker(limit time.Duration) Event {
	c.t.Helper()
	v := c.idleTrainer()
	if v < 0 {
		v = c.Trainers()[len(c.Trainers())-1]
	}
	return c.killThenRestart("kill worker", v, limit)
}

// KillFastest kills the trainer whose clock is strictly ahead of every
// other trainer's, once one is: its pushes of iterations the others have
// not reached are acknowledged, so its removal lowers the gate's t_max
// (under --balance the next allocation must still start after them: bug
// 12 in docs/reliability.md). It restarts it as KillWorker does.
func (c *FaultCluster) KillFastest(limit time.Duration) Event {
	c.t.Helper()
	v, clocks := -1, map[int]int64{}
	c.WaitFor("a trainer ahead of the others", limit, func() bool {
		clocks = c.gateClocks(c.Statuses())
		v = -1
		tie := false
		for _, i := range c.Trainers() {
			it, ok := clocks[i]
			switch {
			case !ok:
				return false // not in a clock table now: wait
			case v < 0 || it > clocks[v]:
				v, tie = i, false
			case it == clocks[v]:
				tie = true
			}
		}
		if tie {
			v = -1
		}
		return v >= 0
	})
	if v < 0 { // a stall, recorded by WaitFor: still a fault to run
		v = c.Trainers()[0]
	}
	c.t.Logf("kill fastest worker: node%d at clock %d, the trainers at %v", v, clocks[v], clocks)
	return c.killThenRestart("kill fastest worker", v, limit)
}

// highest is the highest of clocks, 0 for none.
func highest(clocks map[int]int64) int64 {
	var h int64
	for _, c := range clocks {
		h = max(h, c)
	}
	return h
}

// gateClocks is each node's clock in the shard leaders' clock tables, the
// highest any of the statuses st shows (a worker's own iteration count
// starts over when its process does).
func (c *FaultCluster) gateClocks(st []*status.Status) map[int]int64 {
	out := map[int]int64{}
	for _, s := range st {
		for _, w := range workersOf(s) {
			if i := slices.Index(c.IDs, w.ID); i >= 0 {
				out[i] = max(out[i], w.Clock)
			}
		}
	}
	return out
}

// killThenRestart kills v, waits for the survivors to take over and move
// on, and restarts v on its data dir.
func (c *FaultCluster) killThenRestart(kind string, v int, limit time.Duration) Event {
	c.t.Helper()
	e := Event{Kind: kind, Victims: []int{v}, At: time.Now()}
	c.Kill(v)
	c.afterDeath(&e, without(c.all(), v), limit)
	e.End = time.Now()
	c.Restart(v)
	c.WaitHealthy(e.Kind, 3, limit)
	return e
}

// KillRestart kills a follower and restarts it at once, before the mesh
// declares it dead: it must recover from its WAL and catch up.
func (c *FaultCluster) KillRestart(limit time.Duration) Event {
	c.t.Helper()
	v := c.idleTrainer()
	if v < 0 {
		v = len(c.Mesh.Procs) - 1
	}
	e := Event{Kind: "kill+restart follower", Victims: []int{v}, At: time.Now()}
	c.Kill(v)
	c.Restart(v)
	e.End = time.Now()
	e.Recover = c.WaitHealthy(e.Kind, 5, limit) + e.End.Sub(e.At)
	return e
}

// KillAll kills every node, restarts them all, and checks that training
// resumes from the replicated state: every shard's clocks continue past
// where they were and accuracy is not lost.
func (c *FaultCluster) KillAll(limit time.Duration) Event {
	c.t.Helper()
	all := c.all()
	before := c.Statuses()
	maxClock, accBefore := highest(c.gateClocks(before)), Accuracy(before)
	e := Event{Kind: "kill all + restart", Victims: all, At: time.Now()}
	for _, i := range all {
		c.Kill(i)
	}
	c.StartAll(all...)
	e.End = time.Now()
	e.Recover = c.WaitHealthy(e.Kind, 5, limit) + e.End.Sub(e.At)
	resumed := highest(c.gateClocks(c.Statuses()))
	if resumed <= maxClock {
		c.t.Errorf("kill all: clocks at %d after the restart, %d before: training did not resume from the replicated state", resumed, maxClock)
	}
	if accBefore != nil {
		// Up to three evaluations, until one is within 0.15 of the last
		// before: early in training, under a gate that lets reads lag 15
		// iterations, evaluations a second apart fall by 0.15–0.24 and
		// recover within seconds, before a fault as after it, with
		// --balance or without (0.845 → 0.694 → 0.823; 0.725 → 0.484 →
		// 0.605 → 0.716), while parameters lost to the restart
		// stay lost. Whether they were is decided exactly by the samples
		// the first model evaluated after the restart holds.
		var after []*records.EvalResult
		recovered := func() bool {
			return slices.ContainsFunc(after, func(a *records.EvalResult) bool { return a.Accuracy >= accBefore.Accuracy-0.15 })
		}
		c.WaitFor("an evaluation after the restart", limit, func() bool {
			a := Accuracy(c.Statuses())
			if a != nil && a.At.After(e.End) && (len(after) == 0 || a.Seq > after[len(after)-1].Seq) {
				after = append(after, a)
			}
			return len(after) == 3 || recovered()
		})
		if len(after) == 0 {
			return e // a stall, recorded by WaitFor
		}
		accs := make([]string, len(after))
		for i, a := range after {
			accs[i] = fmt.Sprintf("%.3f", a.Accuracy)
		}
		c.t.Logf("kill all: accuracy %.3f before, %s after the restart; samples applied %d → %d; max clock %d → %d",
			accBefore.Accuracy, strings.Join(accs, ", "), accBefore.Seq, after[0].Seq, maxClock, resumed)
		if after[0].Seq < accBefore.Seq {
			c.t.Errorf("kill all: the first model evaluated after the restart holds %d samples, the last before it %d: parameters rolled back", after[0].Seq, accBefore.Seq)
		}
		if !recovered() {
			c.t.Errorf("kill all: accuracy fell from %.3f to %s in three evaluations: parameters not recovered", accBefore.Accuracy, strings.Join(accs, ", "))
		}
	}
	return e
}

// PartitionMinority cuts one node off for d, then heals.
func (c *FaultCluster) PartitionMinority(v int, d, limit time.Duration) Event {
	c.t.Helper()
	rest := without(c.all(), v)
	e := Event{Kind: "partition minority", Victims: []int{v}, At: time.Now()}
	c.Partition(rest, []int{v})
	c.afterDeath(&e, rest, max(limit, d))
	c.holdUntil(e.At.Add(d))
	c.Heal()
	e.End = time.Now()
	c.WaitHealthy(e.Kind+" healed", 3, limit)
	return e
}

// PartitionLeaderFollower puts the node leading most shards and one node
// replicating one of them on the minority side for d, then heals. The
// majority side elects leaders for the shards whose quorum it holds; the
// leader keeps the shards for which it and its follower are a quorum.
func (c *FaultCluster) PartitionLeaderFollower(d, limit time.Duration) Event {
	c.t.Helper()
	l := c.mostLeading()
	f := -1
	st, _ := c.Status(l)
	for _, sh := range st.Shards {
		if sh.Local != "leader" {
			continue
		}
		for _, id := range sh.Voters {
			if k := slices.Index(c.IDs, id); k >= 0 && k != l && f < 0 {
				f = k
			}
		}
	}
	if f < 0 {
		f = without(c.all(), l)[0]
	}
	minority := []int{l, f}
	rest := without(c.all(), minority...)
	e := Event{Kind: "partition leader+follower", Victims: minority, At: time.Now()}
	c.Partition(rest, minority)
	c.holdCut(&e, "majority detects the minority", rest, d, limit, c.Heal)
	return e
}

// holdCut measures how long the nodes rest take to see only each other
// after the cut that began at e.At (e.Detect), holds it until e.At+d,
// lifts it with heal (e.End) and waits until the mesh is healthy again
// (e.Recover, from e.At).
func (c *FaultCluster) holdCut(e *Event, what string, rest []int, d, limit time.Duration, heal func()) {
	c.t.Helper()
	got := c.measure(e.Kind+": "+what, max(limit, d), map[string]func() bool{
		"detect": func() bool {
			for _, i := range rest {
				if !c.membersAre(i, rest) {
					return false
				}
			}
			return true
		},
	})
	e.Detect = got["detect"]
	c.holdUntil(e.At.Add(d))
	heal()
	e.End = time.Now()
	e.Recover = c.WaitHealthy(e.Kind+" healed", 3, limit) + e.End.Sub(e.At)
}

// PauseLeader stops the node leading most shards with SIGSTOP for d (past
// the election timeout), then resumes it.
func (c *FaultCluster) PauseLeader(d, limit time.Duration) Event {
	c.t.Helper()
	l := c.mostLeading()
	rest := without(c.all(), l)
	e := Event{Kind: "SIGSTOP leader", Victims: []int{l}, At: time.Now()}
	c.Stop(l)
	got := c.measure(e.Kind+": others elect", max(limit, d), map[string]func() bool{
		"elect": func() bool { return c.ledBy(rest, rest) },
	})
	e.Elect = got["elect"]
	c.holdUntil(e.At.Add(d))
	c.Cont(l)
	e.End = time.Now()
	e.Recover = c.WaitHealthy(e.Kind+" resumed", 3, limit) + e.End.Sub(e.At)
	return e
}

// Lossy drops 5% of datagrams (DSSP_FAULT_LOSS=f: a fraction f, to make
// membership flap while chasing what that does), duplicates 2% and delays
// every one by 1–5 ms for d; the mesh must keep training through it.
func (c *FaultCluster) Lossy(d, limit time.Duration) Event {
	c.t.Helper()
	e := Event{Kind: "lossy network", At: time.Now()}
	loss := 0.05
	if f, err := strconv.ParseFloat(os.Getenv("DSSP_FAULT_LOSS"), 64); err == nil && f >= 0 && f < 1 {
		loss = f
	}
	c.Net.Lossy(loss, 0.02, time.Millisecond, 4*time.Millisecond)
	got := c.measure(e.Kind+": training goes on", max(limit, d), map[string]func() bool{
		"recover": c.progressed(c.Trainers(), 3),
	})
	e.Recover = got["recover"]
	c.holdUntil(e.At.Add(d))
	c.Net.Lossy(0, 0, 0, 0)
	e.End = time.Now()
	c.WaitHealthy(e.Kind+" over", 3, limit)
	return e
}

// RollingRestart restarts every node in turn with SIGTERM (a graceful
// leave), waiting for a healthy mesh between two.
func (c *FaultCluster) RollingRestart(limit time.Duration) []Event {
	c.t.Helper()
	var out []Event
	for _, i := range c.all() {
		e := Event{Kind: "rolling restart", Victims: []int{i}, At: time.Now()}
		c.Terminate(i)
		c.Restart(i)
		e.End = time.Now()
		e.Recover = c.WaitHealthy(fmt.Sprintf("rolling restart of node%d", i), 3, limit) + e.End.Sub(e.At)
		out = append(out, e)
	}
	return out
}

// WrongKeyJoin starts a node holding another mesh key that tries to join
// through node 0's proxy: it must give up with an error, and the mesh must
// neither list it nor stop training.
func (c *FaultCluster) WrongKeyJoin(limit time.Duration) Event {
	c.t.Helper()
	e := Event{Kind: "wrong-key join", At: time.Now()}
	dir := c.t.TempDir()
	key := filepath.Join(dir, "other.key")
	if err := mesh.WriteKeyFile(key); err != nil {
		c.t.Fatal(err)
	}
	ports, err := launch.FreePorts(3)
	if err != nil {
		c.t.Fatal(err)
	}
	seed, _ := c.Status(0)
	gossip0 := ""
	for _, m := range seed.Members {
		if m.ID == c.IDs[0] {
			gossip0 = m.Gossip
		}
	}
	prog := c.progressed(c.Trainers(), 3)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.Mesh.Binary, "node", "--data-dir", filepath.Join(dir, "data"), "--key", key,
		"--gossip-port", strconv.Itoa(ports[0]), "--quic-port", strconv.Itoa(ports[1]), "--http-addr", "127.0.0.1:"+strconv.Itoa(ports[2]),
		"--join", gossip0, "--join-timeout", "5s", "--log-level", "error")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	if ctx.Err() != nil || err == nil {
		c.t.Fatalf("wrong-key node: want an error exit, got %v after %v: %s", err, time.Since(e.At), stderr.String())
	}
	if !strings.Contains(stderr.String(), "no seed answered") {
		c.t.Errorf("wrong-key node's error does not say why: %q", stderr.String())
	}
	e.End = time.Now()
	for _, i := range c.all() {
		if !c.membersAre(i, c.all()) {
			c.t.Errorf("node%d's membership changed after a wrong-key join attempt", i)
		}
	}
	e.Recover = c.WaitFor("training goes on after the wrong-key join", limit, prog) + e.End.Sub(e.At)
	return e
}

// holdUntil keeps a fault in place until t. This is the fault's duration,
// not synchronisation: nothing waits on it to become true. The evidence's
// timeline (Cluster.poll) goes on meanwhile.
func (c *FaultCluster) holdUntil(t time.Time) {
	for d := time.Until(t); d > 0; d = time.Until(t) {
		if c.poll != nil {
			c.poll()
		}
		time.Sleep(min(d, time.Second))
	}
}

// workersOf is s's clock table; nil for a node that did not answer.
func workersOf(s *status.Status) []records.WorkerStatus {
	if s == nil {
		return nil
	}
	return s.Workers
}

// CutSite cuts the link lab's site off from the others for d (Lab.Cut:
// every packet between it and the other sites dropped, silently), then
// heals it. The side holding a shard's quorum keeps it; the mesh must be
// healthy again after the heal.
func (c *FaultCluster) CutSite(site int, d, limit time.Duration) Event {
	c.t.Helper()
	var victims []int
	for _, h := range c.Lab.Hosts() {
		if h.Site == site {
			victims = append(victims, h.Index)
		}
	}
	rest := without(c.all(), victims...)
	e := Event{Kind: "site cut", Victims: victims, At: time.Now()}
	if err := c.Lab.Cut(site); err != nil {
		c.t.Fatal(err)
	}
	c.holdCut(&e, "the other sites see it gone", rest, d, limit, func() {
		if err := c.Lab.Heal(site); err != nil {
			c.t.Fatal(err)
		}
	})
	return e
}
