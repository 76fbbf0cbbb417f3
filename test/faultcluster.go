package test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"dsspmesh/lab/netlab"
	"dsspmesh/node/launch"
	"dsspmesh/nodeclient"
)

// FaultCluster is a Cluster whose peer traffic runs through a [FaultNet]
// and whose nodes write their history (--history-dir) for the checkers. Its
// verbs are the fault vocabulary: Kill, Restart, Stop, Cont, Partition,
// Heal, Lossy; Check runs every checker over the history.
type FaultCluster struct {
	*Cluster
	Net *FaultNet
	// Lab, when set, is the link lab the nodes run on (FaultOptions.Lab):
	// their traffic crosses its links, not Net's proxies.
	Lab        *netlab.Lab
	HistoryDir string
	Policy     string
	Pipeline   bool     // the job runs with --pipeline (the checkers' gate bound)
	Balance    bool     // the job runs with --balance (the shares checker must see shares)
	IDs        []string // node ids, known once each node answered /status
	// trainers keeps the nodes' PyTorch trainers running
	// (DSSP_FAULT_TRAINER=pytorch, faulttrainers_test.go); nil when the
	// nodes train the built-in model.
	trainers interface {
		tend(*FaultCluster)
		keep(dir string) // copies the trainers' logs into dir
	}
	stopped     map[int]bool
	replicaOnly []int
	rejoins     bool // node 0 was given --join after a replacement
}

// FaultOptions configures NewFaultCluster.
type FaultOptions struct {
	Nodes  int
	Args   []string // every node
	Spec   []string // the bootstrap node's job flags
	Policy string   // the job's policy text, for the checkers (e.g. "dssp:3:12")
	// Pipeline: Spec has --pipeline (the checkers judge the gate by s_L−1).
	Pipeline bool
	// Balance: Spec has --balance (the shares checker must see shares).
	Balance bool
	Tags    string // build tags of the binary ("faultinject" for broken builds)
	Seed    uint64 // network randomness
	// ReplicaOnly nodes run with --train=false: they host shards only.
	ReplicaOnly []int
	// Lab, if set, places node i on the link lab's host i (Nodes must be
	// its hosts); peer traffic then crosses the lab's links and Lab.Cut
	// is the partition, with no proxies.
	Lab *netlab.Lab
}

// NewFaultCluster prepares the nodes and their proxies; nothing runs until
// Start. At the end of the test every node is killed (no graceful leave:
// the history is already on disk) and the proxies closed.
func NewFaultCluster(t testing.TB, o FaultOptions) *FaultCluster {
	t.Helper()
	hosts := make([]launch.Host, o.Nodes)
	if o.Lab != nil {
		if hosts = o.Lab.LaunchHosts(); len(hosts) != o.Nodes {
			t.Fatalf("%d nodes on a link lab of %d hosts", o.Nodes, len(hosts))
		}
	}
	c := &FaultCluster{Cluster: newClusterOn(t, BinaryTags(t, o.Tags), hosts, o.Args, o.Spec), Lab: o.Lab,
		Net: NewFaultNet(o.Seed), HistoryDir: filepath.Join(t.TempDir(), "history"), Policy: o.Policy, Pipeline: o.Pipeline,
		Balance: o.Balance,
		IDs:     make([]string, o.Nodes), stopped: map[int]bool{}, replicaOnly: o.ReplicaOnly}
	c.describe = c.Describe
	for _, i := range o.ReplicaOnly {
		c.Mesh.AddArgs(i, "--train=false")
	}
	var gossip0 string
	for i, p := range c.Mesh.Procs {
		if o.Lab != nil {
			c.Mesh.AddArgs(i, "--history-dir", c.HistoryDir)
			continue
		}
		c.Net.Own(port(p.Gossip), i)
		c.Net.Own(port(p.QUIC), i)
		q, err := c.Net.ProxyUDP(i, p.QUIC)
		if err != nil {
			t.Fatal(err)
		}
		g, err := c.gossipProxy(i, p.Gossip)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			gossip0 = g
		}
		c.Mesh.AddArgs(i, "--advertise-gossip", g, "--advertise-quic", q, "--history-dir", c.HistoryDir)
		if i > 0 {
			c.Mesh.AddArgs(i, "--join", gossip0)
		}
	}
	t.Cleanup(func() {
		for i, p := range c.Mesh.Procs {
			if c.stopped[i] {
				c.Mesh.Signal(i, syscall.SIGCONT)
			}
			if p.Alive() {
				c.Mesh.Kill(i)
			}
		}
		c.Net.Close()
		if t.Failed() || os.Getenv("DSSP_FAULT_KEEP") == "1" {
			c.keep()
		}
	})
	return c
}

// gossipProxy starts the UDP and TCP proxies of a node's gossip on one
// port (memberlist advertises one host:port for both).
func (c *FaultCluster) gossipProxy(i int, target string) (string, error) {
	var last error
	for range 10 {
		addr, err := c.Net.ProxyUDP(i, target)
		if err != nil {
			return "", err
		}
		if last = c.Net.ProxyTCP(i, addr, target); last == nil {
			return addr, nil
		}
	}
	return "", last
}

func port(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}

// refreshIDs learns the id of every node that answers (a replaced node
// has a new one).
func (c *FaultCluster) refreshIDs() {
	for i := range c.Mesh.Procs {
		if s, err := c.Status(i); err == nil {
			c.IDs[i] = s.Node
		}
	}
}

// Start starts node i, waits for /status and learns its id.
func (c *FaultCluster) Start(i int) {
	c.t.Helper()
	c.Cluster.Start(i)
	s, err := c.Status(i)
	if err == nil {
		c.IDs[i] = s.Node
	}
}

// StartAll starts every node at once (a whole-mesh restart: each finds the
// others through its persisted peers) and waits until all answer.
func (c *FaultCluster) StartAll(nodes ...int) {
	c.t.Helper()
	for _, i := range nodes {
		delete(c.killed, i)
		if err := c.Mesh.Start(i); err != nil {
			c.t.Fatal(err)
		}
	}
	for _, i := range nodes {
		c.WaitFor(fmt.Sprintf("node%d answers /status", i), 60*time.Second, func() bool {
			_, err := c.Status(i)
			return err == nil
		})
	}
}

// Stop pauses node i with SIGSTOP; Cont resumes it.
func (c *FaultCluster) Stop(i int) {
	c.t.Helper()
	if err := c.Mesh.Signal(i, syscall.SIGSTOP); err != nil {
		c.t.Fatal(err)
	}
	c.stopped[i] = true
}

// Cont resumes node i after Stop.
func (c *FaultCluster) Cont(i int) {
	c.t.Helper()
	if err := c.Mesh.Signal(i, syscall.SIGCONT); err != nil {
		c.t.Fatal(err)
	}
	delete(c.stopped, i)
}

// Terminate sends SIGTERM (a graceful leave) and waits for node i to exit.
func (c *FaultCluster) Terminate(i int) {
	c.t.Helper()
	c.killed[i] = true
	if err := c.Mesh.Signal(i, syscall.SIGTERM); err != nil {
		c.t.Fatal(err)
	}
	c.WaitFor(fmt.Sprintf("node%d to leave", i), 30*time.Second, func() bool { return !c.Mesh.Procs[i].Alive() })
}

// Partition cuts the mesh into groups of node indices; Heal rejoins them.
func (c *FaultCluster) Partition(groups ...[]int) { c.Net.Partition(groups...) }

// Heal removes the partition.
func (c *FaultCluster) Heal() { c.Net.Heal() }

// LeaderCounts is, per node index, how many shards it leads (from every
// live node's view).
func (c *FaultCluster) LeaderCounts() map[int]int {
	out := map[int]int{}
	for _, i := range Leaders(c.Statuses()) {
		out[i]++
	}
	return out
}

// Check reads the history and runs every checker.
func (c *FaultCluster) Check() *Report {
	c.t.Helper()
	h, err := ReadHistory(c.HistoryDir)
	if err != nil {
		c.t.Fatal(err)
	}
	rep, err := h.Check(c.Policy, c.Pipeline)
	if err != nil {
		c.t.Fatal(err)
	}
	return rep
}

// Iters is the worker iteration of each node in nodes (-1 where it does
// not answer).
func (c *FaultCluster) Iters(nodes []int) map[int]int64 {
	out := map[int]int64{}
	for _, i := range nodes {
		out[i] = c.Iter(i)
	}
	return out
}

// WaitProgress waits until every node in nodes is n iterations past where
// it was at the call and returns how long it took.
func (c *FaultCluster) WaitProgress(what string, nodes []int, n int64, limit time.Duration) time.Duration {
	c.t.Helper()
	base := c.Iters(nodes)
	return c.WaitFor(what, limit, func() bool {
		for _, i := range nodes {
			if c.Iter(i) < base[i]+n {
				return false
			}
		}
		return true
	})
}

// WaitMembers waits until every node in nodes sees exactly the members
// want (node indices) and returns how long it took.
func (c *FaultCluster) WaitMembers(what string, nodes, want []int, limit time.Duration) time.Duration {
	c.t.Helper()
	ids := make([]string, 0, len(want))
	for _, i := range want {
		ids = append(ids, c.IDs[i])
	}
	slices.Sort(ids)
	return c.WaitFor(what, limit, func() bool {
		for _, i := range nodes {
			s, err := c.Status(i)
			if err != nil || len(s.Members) != len(ids) {
				return false
			}
			for k, m := range s.Members {
				if m.ID != ids[k] {
					return false
				}
			}
		}
		return true
	})
}

// Describe is every node's view in one line each, for failure messages:
// per shard id:leader/term/local state/v voters/a applied index.
func (c *FaultCluster) Describe() string {
	var b strings.Builder
	for i := range c.Mesh.Procs {
		s, err := c.Status(i)
		if err != nil {
			fmt.Fprintf(&b, "\n  node%d: %v (alive %v, paused %v)", i, err, c.Mesh.Procs[i].Alive(), c.stopped[i])
			continue
		}
		fmt.Fprintf(&b, "\n  node%d %s: %d members, shards", i, s.Node, len(s.Members))
		for _, sh := range s.Shards {
			fmt.Fprintf(&b, " %d:%s/t%d/%s/v%d/a%d", sh.ID, short(sh.Leader), sh.Term, sh.Local, len(sh.Voters), sh.Applied)
		}
		if s.Worker != nil {
			fmt.Fprintf(&b, "; iter %d err %q", s.Worker.Iter, s.Worker.LastError)
		}
		fmt.Fprintf(&b, "; clocks")
		for _, w := range s.Workers {
			fmt.Fprintf(&b, " %s=%d(w%v)", short(w.ID), w.Clock, w.Waiting)
		}
	}
	return b.String()
}

func short(id string) string {
	if len(id) > 9 {
		return id[5:9]
	}
	return id
}

// keep copies the nodes' logs and history out of the test's temporary
// folders (removed when the test ends) so a failure can be studied.
func (c *FaultCluster) keep() {
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("dssp-%s-%d", strings.ReplaceAll(c.t.Name(), "/", "_"), time.Now().Unix()))
	if err := os.CopyFS(filepath.Join(dir, "history"), os.DirFS(c.HistoryDir)); err != nil {
		c.t.Logf("keep history: %v", err)
	}
	for i, p := range c.Mesh.Procs {
		if b, err := os.ReadFile(p.LogPath); err == nil {
			os.WriteFile(filepath.Join(dir, filepath.Base(p.LogPath)), b, 0o644)
		}
		// Where a node is stuck, its goroutines say on what (the fault
		// mesh serves pprof).
		if p.Alive() && !c.stopped[i] {
			if b, err := nodeclient.Get(context.Background(), fmt.Sprintf("http://%s/debug/pprof/goroutine?debug=2", p.HTTP), 10*time.Second); err == nil {
				os.WriteFile(filepath.Join(dir, fmt.Sprintf("node%d-goroutines.txt", i)), b, 0o644)
			}
		}
	}
	if c.trainers != nil {
		c.trainers.keep(dir)
	}
	c.t.Logf("logs, goroutines and history kept in %s", dir)
}

// Crash is a node that exited on its own during a scenario.
type Crash struct {
	Node int
	ID   string
	At   time.Time
	Err  string
}

// ReplaceCrashed makes WaitFor replace a node that exits on its own
// instead of failing at once: the crash is recorded (the caller fails the
// test with them at the end), the node's log is kept, and the node starts
// again on a fresh data dir (a new identity: its old one may be what made
// it crash). Long runs use it to report every crash rather than the first.
func (c *FaultCluster) ReplaceCrashed() *[]Crash {
	var crashes []Crash
	c.crashed = func(i int, err error) bool {
		p := c.Mesh.Procs[i]
		why := err.Error()
		if b, rerr := os.ReadFile(p.LogPath); rerr == nil {
			// A panic's message is above its stack, not in the tail.
			if k := strings.LastIndex(string(b), "\npanic: "); k >= 0 {
				why, _, _ = strings.Cut(string(b[k+1:]), "\n")
			}
		}
		crashes = append(crashes, Crash{Node: i, ID: c.IDs[i], At: time.Now(), Err: why})
		c.t.Logf("CRASH node%d (%s): %v", i, c.IDs[i], err)
		keep := filepath.Join(os.TempDir(), fmt.Sprintf("dssp-crash-%s-node%d-%d", strings.ReplaceAll(c.t.Name(), "/", "_"), i, time.Now().Unix()))
		os.MkdirAll(keep, 0o755)
		if b, err := os.ReadFile(p.LogPath); err == nil {
			os.WriteFile(filepath.Join(keep, "node.log"), b, 0o644)
		}
		os.Rename(p.DataDir, filepath.Join(keep, "data"))
		if i == 0 && !c.rejoins {
			// Node 0 bootstrapped the mesh and starts without --join; on
			// a fresh data dir it must join the others instead.
			c.rejoins = true
			for _, m := range c.peerGossip(0) {
				c.Mesh.AddArgs(0, "--join", m)
			}
		}
		if err := c.Mesh.Start(i); err != nil {
			c.t.Fatalf("restart node%d after its crash: %v", i, err)
		}
		c.t.Logf("node%d's log and data dir kept in %s; restarted on a fresh data dir", i, keep)
		return true
	}
	return &crashes
}

// Stall is a wait that ran out of time during a scenario: the mesh did not
// recover from a fault within the limit.
type Stall struct {
	At  time.Time
	Msg string
}

// RecoverStalls makes a WaitFor that runs out of time record the stall
// (the caller fails the test with them at the end), keep the logs, and
// unstick the mesh by killing and restarting every node, instead of
// failing at once. A stall while unsticking fails the test.
func (c *FaultCluster) RecoverStalls() *[]Stall {
	var stalls []Stall
	busy := false
	c.stalled = func(msg string) bool {
		if busy {
			return false
		}
		busy = true
		defer func() { busy = false }()
		stalls = append(stalls, Stall{At: time.Now(), Msg: msg})
		c.t.Logf("STALL: %s", msg)
		for i, p := range c.Mesh.Procs {
			c.t.Logf("node%d's distinct warnings, newest last:\n    %s", i, strings.Join(distinctWarnings(p.LogPath, 12), "\n    "))
		}
		c.keep()
		c.Heal()
		c.Net.Lossy(0, 0, 0, 0)
		for i := range c.Mesh.Procs {
			if c.stopped[i] {
				c.Cont(i)
			}
			if c.Mesh.Procs[i].Alive() {
				c.Kill(i)
			}
		}
		c.StartAll(c.all()...)
		c.WaitHealthy("after a stall, every node restarted", 3, 4*time.Minute)
		return true
	}
	return &stalls
}

// peerGossip is the advertised gossip address of every node but i, as the
// live nodes report them.
func (c *FaultCluster) peerGossip(i int) []string {
	var out []string
	for k := range c.Mesh.Procs {
		if k == i {
			continue
		}
		if s, err := c.Status(k); err == nil {
			for _, m := range s.Members {
				if m.ID == s.Node {
					out = append(out, m.Gossip)
				}
			}
		}
	}
	return out
}
