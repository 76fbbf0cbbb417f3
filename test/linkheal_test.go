package test

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"dsspmesh/lab/netlab"
	"dsspmesh/node/records"
)

// TestLinkHeal measures a heal across the link lab's two sites (100
// Mbit/s and 25 ms one way between them): a node of the far site (not
// the bootstrap's) is killed with SIGKILL once the mesh trains, its data
// dir removed, and once the others train on without it it is started
// again, a new member with no state. It
// must train again, and its /status must tell the heal's timeline: each
// replica opened, the state received (bytes and rate), caught up, and the
// first round acknowledged. The test logs the time to train again against
// 1.5 × (the state bytes it received ÷ the link's rate) + 5 s, the bound
// BENCHMARKS.md ("Across sites") reports it against; it asserts the behaviour,
// not the figure. DSSP_HEAL_MODEL picks the model (mlp; mlp-wide is the
// 95 MiB one) and DSSP_HEAL_SHARDS the shards (4); DSSP_HEAL_KILL_DONOR=1
// also kills, with SIGKILL, the leader of a shard whose snapshot the node
// still waits for (its bound is then 2.5 ×, not 1.5 ×). A long test
// (DSSP_LONG=1); it needs root.
func TestLinkHeal(t *testing.T) {
	longTest(t)
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	netlab.Require(t)
	model, shards := os.Getenv("DSSP_HEAL_MODEL"), os.Getenv("DSSP_HEAL_SHARDS")
	if model == "" {
		model = "mlp"
	}
	if shards == "" {
		shards = "4"
	}
	lab := startLab(t, netlab.Presets["two-sites"])
	c := newClusterOn(t, Binary(t), lab.LaunchHosts(), []string{"--threads", "1", "--eval-every", "10s", "--eval-samples", "500", "--log-level", "info"},
		[]string{"--model", model, "--shards", shards, "--local-steps", "16"})
	for i := range c.Mesh.Procs {
		c.Start(i)
	}
	limit, warm := 5*time.Minute, int64(3)
	if model != "mlp" {
		limit, warm = 10*time.Minute, 1 // rounds of a large model take tens of seconds here
	}
	c.WaitFor(fmt.Sprintf("every worker past iteration %d", warm), limit, func() bool {
		for i := range c.Mesh.Procs {
			if c.Iter(i) < warm {
				return false
			}
		}
		return true
	})
	victim := -1
	for _, h := range lab.Hosts() {
		if h.Site != lab.Hosts()[0].Site {
			victim = h.Index
		}
	}
	old, err := c.Status(victim)
	if err != nil {
		t.Fatal(err)
	}
	// The others' rounds a second over 10 s once they train on without
	// the victim, and then while it heals: the transfer must not stall
	// them.
	var others []int
	for i := range c.Mesh.Procs {
		if i != victim {
			others = append(others, i)
		}
	}
	sum := func() (n int64) {
		for _, i := range others {
			if c.Mesh.Procs[i].Alive() {
				n += c.Iter(i)
			}
		}
		return n
	}
	c.Kill(victim)
	killed := sum()
	c.WaitFor("the others train on without the victim", limit, func() bool { return sum() >= killed+2*int64(len(others)) })
	before0, at0 := sum(), time.Now()
	time.Sleep(10 * time.Second) // a window of the mesh's own pace, not a synchronisation
	before := float64(sum()-before0) / time.Since(at0).Seconds()
	if err := os.RemoveAll(c.Mesh.Procs[victim].DataDir); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	during0 := sum()
	c.Restart(victim)
	donor := -1
	if os.Getenv("DSSP_HEAL_KILL_DONOR") == "1" {
		// Kill the leader of a shard whose snapshot the victim is still
		// waiting for: a new leader must send it again, from the start
		// (hashicorp/raft sends a snapshot from the leader alone and
		// resumes none), and the victim must not be left stuck.
		c.WaitFor(fmt.Sprintf("a donor sending node%d a snapshot", victim), limit, func() bool {
			s, err := c.Status(victim)
			if err != nil || s.Node == old.Node {
				return false
			}
			waiting := map[uint32]bool{}
			for _, e := range s.Events {
				switch {
				case e.Kind != records.EventHeal || e.Shard == nil:
				case strings.Contains(e.Detail, "replica opened empty"):
					waiting[*e.Shard] = true
				case strings.Contains(e.Detail, "state received"), strings.Contains(e.Detail, "caught up"):
					delete(waiting, *e.Shard)
				}
			}
			for _, sh := range s.Shards {
				if !waiting[sh.ID] || sh.Leader == "" || sh.Leader == s.Node {
					continue
				}
				for i, p := range c.Mesh.Procs {
					if st, err := c.Status(i); i != victim && p.Alive() && err == nil && st.Node == sh.Leader {
						donor = i
						t.Logf("killing node%d, leader of shard %d, %.2f s after node%d's restart, before its snapshot arrived", i, sh.ID, time.Since(start).Seconds(), victim)
						c.Kill(i)
						return true
					}
				}
			}
			return false
		})
	}
	took := c.WaitFor(fmt.Sprintf("node%d (far site, empty data dir) trains again", victim), limit, func() bool {
		s, err := c.Status(victim)
		return err == nil && s.Node != old.Node && s.Worker != nil && s.Worker.Iter > 0
	})
	trained := time.Since(start)
	during := float64(sum()-during0) / trained.Seconds()
	var steps []string
	var bytes float64
	var heal []records.Event
	defer func() {
		if t.Failed() {
			for _, e := range heal {
				t.Logf("heal event +%.2fs: %s", e.At.Sub(start).Seconds(), e.Detail)
			}
		}
	}()
	c.WaitFor(fmt.Sprintf("node%d's heal timeline complete", victim), time.Minute, func() bool {
		s, err := c.Status(victim)
		if err != nil {
			return false
		}
		heal = heal[:0]
		for _, e := range s.Events {
			if e.Kind == records.EventHeal {
				heal = append(heal, e)
			}
		}
		opened, received, caught, training := 0, 0, 0, 0
		for _, e := range heal {
			switch {
			case strings.Contains(e.Detail, "replica opened empty"):
				opened++
			case strings.Contains(e.Detail, "state received"):
				received++
			case strings.Contains(e.Detail, "caught up"):
				caught++
			case strings.HasPrefix(e.Detail, "training"):
				training++
			}
		}
		return opened > 0 && caught == opened && training == 1
	})
	// The state a replica needed: the snapshot it received, or where it
	// caught up from the leader's log alone its slice of parameters.
	for _, e := range heal {
		steps = append(steps, fmt.Sprintf("+%5.2fs %s", e.At.Sub(start).Seconds(), e.Detail))
		if b := snapshotBytes(e.Detail); b > 0 {
			bytes += b
		} else if strings.Contains(e.Detail, "no snapshot") {
			bytes += sliceBytes(e.Detail)
		}
	}
	rate := 100e6 / 8 // the link between the sites, bytes a second
	factor := 1.5
	if donor >= 0 {
		factor = 2.5
	}
	bound := factor*bytes/rate + 5
	pace := fmt.Sprintf("the other workers' rounds a second %.2f while it healed, %.2f over 10 s without it before its restart (%.2f)", during, before, during/max(before, 1e-9))
	if donor >= 0 || before == 0 {
		pace = "the other workers' rounds a second not compared (a donor was killed, or no round ended in the 10 s before)"
	}
	t.Logf("node%d (%s → a new member) healed: %s of state received; trained again %.2f s after its restart (status poll: %.2f s); bound %.1f × %.2f s (the bytes ÷ 100 Mbit/s) + 5 s = %.2f s: time ÷ bound %.2f; %s\n%s",
		victim, old.Node, humanBytes(bytes), trained.Seconds(), took.Seconds(), factor, bytes/rate, bound, trained.Seconds()/bound, pace, strings.Join(steps, "\n"))
}

var (
	snapshotRE = regexp.MustCompile(`a snapshot of ([0-9.]+) (B|KiB|MiB|GiB)`)
	sliceRE    = regexp.MustCompile(`its slice ([0-9.]+) (B|KiB|MiB|GiB)`)
)

// snapshotBytes is the bytes a "state received" step names, 0 for another.
func snapshotBytes(detail string) float64 { return bytesNamed(snapshotRE, detail) }

// sliceBytes is the slice's bytes a "caught up" step names.
func sliceBytes(detail string) float64 { return bytesNamed(sliceRE, detail) }

func bytesNamed(re *regexp.Regexp, detail string) float64 {
	m := re.FindStringSubmatch(detail)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v * map[string]float64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[m[2]]
}

func humanBytes(b float64) string {
	return fmt.Sprintf("%.1f MiB", b/(1<<20))
}
