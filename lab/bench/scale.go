package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"dsspmesh/mesh"
	"dsspmesh/node/launch"
	"dsspmesh/node/records"
	"dsspmesh/node/status"
	"dsspmesh/nodeclient"
)

// ScaleConfig is one `dssp-lab bench scale` run: a real local mesh for every
// pair of Nodes × Shards (and every Variant), one after the other.
type ScaleConfig struct {
	Binary      string
	Nodes       []int // N: host-only nodes forming the mesh
	Shards      []int // S
	Replication int   // R
	// Trainers is how many training nodes join the N hosts for the
	// training window (0 skips it).
	Trainers int
	Threads  int // compute goroutines per trainer
	// Idle and Train are the measurement windows; Converge bounds every
	// wait for the mesh to settle (formation, a join, a leave, trainers
	// starting).
	Idle, Train, Converge time.Duration
	Churn                 bool // one node joins, then leaves again
	Poll                  time.Duration
	Detection             string
	// Variants run every point once per variant, each with its own extra
	// node flags: a before/after comparison in one run.
	Variants []ScaleVariant
	SpecArgs []string // extra job flags for the bootstrap node
	// ProfileDir, if set, receives a CPU profile of node 1 over the idle
	// window (the nodes must serve /debug/pprof: a variant with --pprof).
	ProfileDir string
	OutDir     string
	Out        io.Writer
}

// ScaleVariant names a set of extra flags given to every node.
type ScaleVariant struct {
	Name  string
	Flags []string
}

// ParseScaleVariant reads "name:flag flag..." (flags separated by spaces,
// possibly none).
func ParseScaleVariant(s string) (ScaleVariant, error) {
	name, flags, ok := strings.Cut(s, ":")
	name = strings.TrimSpace(name)
	if !ok || name == "" || strings.ContainsAny(name, ", ") {
		return ScaleVariant{}, fmt.Errorf("--variant %q: want NAME:FLAGS (e.g. 'fixed:--raft-timing=fixed'; FLAGS may be empty)", s)
	}
	v := ScaleVariant{Name: name, Flags: strings.Fields(flags)}
	for _, f := range v.Flags {
		if !strings.HasPrefix(f, "--") {
			return ScaleVariant{}, fmt.Errorf("--variant %q: %q is not a --flag", s, f)
		}
	}
	return v, nil
}

// DefaultScaleConfig is the full sweep: N = 4, 8, 16, 32 × S = 4, 16, 64,
// R = 3, two trainers. Run it in pieces (--nodes 4,8 then --nodes 16 ...):
// results accumulate in OutDir.
func DefaultScaleConfig() ScaleConfig {
	return ScaleConfig{
		Nodes: []int{4, 8, 16, 32}, Shards: []int{4, 16, 64}, Replication: 3,
		Trainers: 2, Threads: 1, Idle: 10 * time.Second, Train: 15 * time.Second, Converge: 2 * time.Minute,
		Churn: true, Poll: time.Second, Detection: "tuned", OutDir: "bench-scale",
		Variants: []ScaleVariant{{Name: "default"}},
	}
}

// Validate names the first bad value.
func (c ScaleConfig) Validate() error {
	switch {
	case c.Binary == "":
		return errors.New("bench scale: no dssp binary to start")
	case len(c.Nodes) == 0:
		return errors.New("--nodes: give at least one mesh size")
	case len(c.Shards) == 0:
		return errors.New("--shards: give at least one shard count")
	case c.Replication < 1 || c.Replication > 7:
		return fmt.Errorf("--replication %d outside 1..7", c.Replication)
	case c.Replication%2 == 0:
		return fmt.Errorf("--replication %d is even: the nodes refuse it (an even group survives no more failures than the odd one below it)", c.Replication)
	case c.Trainers < 0 || c.Trainers > 8:
		return fmt.Errorf("--trainers %d outside 0..8", c.Trainers)
	case c.Threads < 0:
		return fmt.Errorf("--threads %d must be >= 0", c.Threads)
	case c.Idle < time.Second:
		return fmt.Errorf("--idle %v must be >= 1s", c.Idle)
	case c.Trainers > 0 && c.Train < time.Second:
		return fmt.Errorf("--train %v must be >= 1s", c.Train)
	case c.Converge < 5*time.Second:
		return fmt.Errorf("--converge %v must be >= 5s", c.Converge)
	case c.Poll <= 0:
		return fmt.Errorf("--poll %v must be > 0", c.Poll)
	case c.Detection != "tuned" && c.Detection != "lan" && c.Detection != "fast":
		return fmt.Errorf("--detection %q must be tuned, lan or fast", c.Detection)
	case len(c.Variants) == 0:
		return errors.New("--variant: at least one")
	case c.OutDir == "":
		return errors.New("--out must not be empty")
	}
	for _, n := range c.Nodes {
		if n < 1 || n+1+c.Trainers > 64 {
			return fmt.Errorf("--nodes %d: each mesh size must be >= 1 and, with the joiner and %d trainers, at most 64 processes", n, c.Trainers)
		}
	}
	for _, s := range c.Shards {
		if s < 1 || s > 1024 {
			return fmt.Errorf("--shards %d outside 1..1024", s)
		}
	}
	seen := map[string]bool{}
	for _, v := range c.Variants {
		if seen[v.Name] {
			return fmt.Errorf("--variant %q given twice", v.Name)
		}
		seen[v.Name] = true
	}
	return nil
}

// NodeCost is the mean (and, for memory, the largest) cost of one role's
// nodes over one measurement window.
type NodeCost struct {
	Nodes      int
	RSS        float64 // MiB, mean at the end of the window
	RSSMax     float64 // MiB, largest
	CPU        float64 // cores (1 = one core busy), mean
	CPUMax     float64 // the busiest node's
	GossipBps  float64 // memberlist bytes sent per second, mean
	Heartbeats float64 // raft heartbeats answered per second, mean
	// HeartbeatsMax is the node sending the most (the leader of the most
	// groups: the bootstrap node keeps leading every shard it still hosts).
	HeartbeatsMax float64
	Goroutines    float64
}

// ScalePoint is one mesh's measurements.
type ScalePoint struct {
	Variant                 string
	Nodes, Shards, Replicas int
	Trainers                int
	// Members is how long after the last node was started every node
	// listed every other; Led how long until every shard had a leader whose
	// Raft voters were its full placement.
	Members, Led time.Duration
	Groups       float64 // raft replicas hosted per node, mean
	Idle         NodeCost
	// TrainHosts are the N host-only nodes and Trainers the training
	// nodes, over the training window.
	TrainHosts, TrainNodes NodeCost
	ItersPerSec            float64 // all trainers
	// JoinMoved and LeaveMoved count the replicas added to shards' voter
	// sets when one node joined the N, and when it left again; Expected is
	// S·R/(N+1). JoinSettle and LeaveSettle are how long the mesh took to
	// converge again.
	JoinMoved, LeaveMoved   int
	Expected                float64
	JoinSettle, LeaveSettle time.Duration
	Load                    float64 // 1-minute load average at the end
	Took                    time.Duration
	Err                     string
}

// ScaleResult is every point of a run, and those loaded from earlier runs
// in the same folder.
type ScaleResult struct {
	Config ScaleConfig
	CPU    string
	Cores  int
	Points []ScalePoint
}

// RunScale measures every point, appending each to OutDir/scale.csv as it
// completes and rewriting the report (scale.md, scale-*.png) from the whole
// file, so a sweep can run in pieces.
func RunScale(ctx context.Context, cfg ScaleConfig, log *slog.Logger) (*ScaleResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	out := cfg.Out
	if out == nil {
		out = io.Discard
	}
	if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	for _, n := range cfg.Nodes {
		for _, s := range cfg.Shards {
			for _, v := range cfg.Variants {
				if ctx.Err() != nil {
					return loadOrEmpty(cfg), ctx.Err()
				}
				fmt.Fprintf(out, "scale %s: %d host nodes, %d shards × %d replicas, %d trainers (load %.1f)\n", v.Name, n, s, cfg.Replication, cfg.Trainers, LoadAverage())
				p := measureScale(ctx, cfg, v, n, s, log, &prefixWriter{w: out, prefix: "  ", all: true})
				if p.Err != "" {
					fmt.Fprintf(out, "  failed: %s\n", p.Err)
				}
				fmt.Fprintf(out, "  %s\n", p.line())
				if err := appendScaleCSV(filepath.Join(cfg.OutDir, "scale.csv"), p); err != nil {
					return loadOrEmpty(cfg), err
				}
			}
		}
	}
	res, err := LoadScale(cfg.OutDir)
	if err != nil {
		return nil, err
	}
	res.Config = cfg
	return res, res.Write(cfg.OutDir)
}

func loadOrEmpty(cfg ScaleConfig) *ScaleResult {
	if r, err := LoadScale(cfg.OutDir); err == nil {
		return r
	}
	return &ScaleResult{Config: cfg, CPU: CPUModel()}
}

func (p ScalePoint) line() string {
	return fmt.Sprintf("members %s, shards led %s; idle per node: rss %.0f MiB, cpu %.1f%%, gossip %.0f B/s, heartbeats %.1f/s, %.0f goroutines, %.1f groups; "+
		"training: hosts cpu %.1f%% rss %.0f MiB, trainers cpu %.1f%% rss %.0f MiB, %.1f it/s; join moved %d, leave moved %d (S·R/(N+1) = %.1f)",
		fmtDur(p.Members), fmtDur(p.Led), p.Idle.RSS, 100*p.Idle.CPU, p.Idle.GossipBps, p.Idle.Heartbeats, p.Idle.Goroutines, p.Groups,
		100*p.TrainHosts.CPU, p.TrainHosts.RSS, 100*p.TrainNodes.CPU, p.TrainNodes.RSS, p.ItersPerSec, p.JoinMoved, p.LeaveMoved, p.Expected)
}

func fmtDur(d time.Duration) string {
	if d <= 0 {
		return "—"
	}
	return d.Round(100 * time.Millisecond).String()
}

// measureScale runs one mesh: N host-only nodes form it (timed), idle
// costs are sampled, one node joins and leaves (replicas moved, timed),
// Trainers training nodes join and training costs are sampled.
func measureScale(ctx context.Context, cfg ScaleConfig, v ScaleVariant, n, s int, log *slog.Logger, out io.Writer) ScalePoint {
	start := time.Now()
	p := ScalePoint{Variant: v.Name, Nodes: n, Shards: s, Replicas: cfg.Replication, Trainers: cfg.Trainers,
		Expected: float64(s*min(cfg.Replication, n+1)) / float64(n+1)}
	err := runScaleMesh(ctx, cfg, v, &p, log, out)
	if err != nil {
		p.Err = strings.ReplaceAll(err.Error(), "\n", " ")
	}
	p.Load = LoadAverage()
	p.Took = time.Since(start)
	return p
}

func runScaleMesh(ctx context.Context, cfg ScaleConfig, v ScaleVariant, p *ScalePoint, log *slog.Logger, out io.Writer) error {
	dir, err := os.MkdirTemp("", "dssp-bench-scale-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	n := p.Nodes
	joiner := n
	total := n + 1 + cfg.Trainers
	m, err := launch.NewMesh(cfg.Binary, dir, total, log)
	if err != nil {
		return err
	}
	defer m.Stop(10 * time.Second)
	for i := range m.Procs {
		m.AddArgs(i, "--detection", cfg.Detection, "--threads", strconv.Itoa(cfg.Threads), "--eval-every", "5s")
		if i <= joiner {
			m.AddArgs(i, "--train=false")
		}
		m.AddArgs(i, v.Flags...)
	}
	m.AddArgs(0, "--shards", strconv.Itoa(p.Shards), "--replication", strconv.Itoa(cfg.Replication))
	m.AddArgs(0, cfg.SpecArgs...)
	// Every node but the bootstrap joins through several seeds so no
	// single node answers every join.
	for i := 1; i < total; i++ {
		seeds := []string{m.Procs[0].Gossip}
		for _, j := range []int{i / 2, i - 1} {
			if j > 0 && j < n && !slices.Contains(seeds, m.Procs[j].Gossip) {
				seeds = append(seeds, m.Procs[j].Gossip)
			}
		}
		if i >= n { // the joiner and trainers: seeds among the first n
			seeds = []string{m.Procs[0].Gossip, m.Procs[n/2].Gossip}
		}
		m.SetJoin(i, seeds...)
	}

	if err := m.Start(0); err != nil {
		return err
	}
	if err := m.WaitUp(ctx, []int{0}, cfg.Converge); err != nil {
		return err
	}
	for i := 1; i < n; i++ {
		if err := m.Start(i); err != nil {
			return err
		}
	}
	t0 := time.Now()
	hosts := idxRange(0, n)
	fmt.Fprintf(out, "forming: %d nodes started\n", n)
	// A node whose port was taken after NewMesh drew it restarts on fresh
	// ports (inside the formation time).
	if err := m.WaitUp(ctx, hosts[1:], cfg.Converge); err != nil {
		return fmt.Errorf("forming: %w", err)
	}
	if r := rebinds(m, hosts); r > 0 {
		fmt.Fprintf(out, "forming: %d nodes restarted on fresh ports (a port was taken)\n", r)
	}
	before, err := waitConverged(ctx, m, hosts, n, p.Shards, cfg, t0, &p.Members, &p.Led)
	if err != nil {
		return fmt.Errorf("forming: %w", err)
	}
	fmt.Fprintf(out, "formed: members %s, shards led %s\n", fmtDur(p.Members), fmtDur(p.Led))

	// Idle: no trainer yet; gossip, heartbeats and upkeep only.
	st := pollAll(ctx, m, hosts)
	p.Groups = meanGroups(st)
	if k, g := busiest(st); k >= 0 {
		fmt.Fprintf(out, "groups: %.1f a node, most on node %d (%d: %d led)\n", p.Groups, hosts[k], g, ledBy(st[k]))
	}
	profiled := make(chan error, 1)
	if cfg.ProfileDir != "" && n > 1 {
		path := filepath.Join(cfg.ProfileDir, fmt.Sprintf("%s-n%d-s%d-idle.pprof", v.Name, n, p.Shards))
		go func() { profiled <- fetchProfile(ctx, m.Procs[1].HTTP, cfg.Idle, path) }()
	} else {
		profiled <- nil
	}
	if p.Idle, err = sampleCosts(ctx, m, hosts, cfg.Idle); err != nil {
		return fmt.Errorf("idle: %w", err)
	}
	if err := <-profiled; err != nil {
		fmt.Fprintf(out, "profile: %v\n", err)
	}
	fmt.Fprintf(out, "idle: cpu %.1f%%/node, rss %.0f MiB/node, heartbeats %.1f/s/node\n", 100*p.Idle.CPU, p.Idle.RSS, p.Idle.Heartbeats)

	if cfg.Churn {
		// Voters are compared between settled polls (see unsettled):
		// a poll that missed a node (a 2 s HTTP timeout under load), or
		// a leader whose placement followed a membership view with a node
		// missing, would count replicas as moved that never moved.
		if err := m.Start(joiner); err != nil {
			return err
		}
		withJoiner := append(slices.Clone(hosts), joiner)
		var members time.Duration
		t := time.Now()
		if err := m.WaitUp(ctx, []int{joiner}, cfg.Converge); err != nil {
			return fmt.Errorf("join: %w", err)
		}
		after, err := waitConverged(ctx, m, withJoiner, n+1, p.Shards, cfg, t, &members, &p.JoinSettle)
		if err != nil {
			return fmt.Errorf("join: %w", err)
		}
		p.JoinMoved = moved(before, after)
		fmt.Fprintf(out, "join: %d replicas moved, settled in %s\n", p.JoinMoved, fmtDur(p.JoinSettle))
		if err := m.Terminate(joiner, cfg.Converge); err != nil {
			return err
		}
		t = time.Now()
		left, err := waitConverged(ctx, m, hosts, n, p.Shards, cfg, t, &members, &p.LeaveSettle)
		if err != nil {
			return fmt.Errorf("leave: %w", err)
		}
		p.LeaveMoved = moved(after, left)
		fmt.Fprintf(out, "leave: %d replicas moved, settled in %s\n", p.LeaveMoved, fmtDur(p.LeaveSettle))
	}

	if cfg.Trainers == 0 {
		return nil
	}
	trainers := idxRange(joiner+1, total)
	for _, i := range trainers {
		if err := m.Start(i); err != nil {
			return err
		}
	}
	if err := m.WaitUp(ctx, trainers, cfg.Converge); err != nil {
		return fmt.Errorf("trainers: %w", err)
	}
	if err := waitTraining(ctx, m, trainers, cfg.Converge); err != nil {
		return fmt.Errorf("trainers: %w", err)
	}
	iters := func() uint64 {
		var sum uint64
		for _, s := range pollAll(ctx, m, trainers) {
			if s != nil && s.Worker != nil {
				sum += s.Worker.Iter
			}
		}
		return sum
	}
	i0, t := iters(), time.Now()
	all := append(slices.Clone(hosts), trainers...)
	costs, err := sampleEach(ctx, m, all, cfg.Train)
	if err != nil {
		return fmt.Errorf("training: %w", err)
	}
	p.ItersPerSec = float64(iters()-i0) / time.Since(t).Seconds()
	p.TrainHosts = meanCost(costs[:len(hosts)])
	p.TrainNodes = meanCost(costs[len(hosts):])
	fmt.Fprintf(out, "training: %.1f it/s; hosts cpu %.1f%%, trainers cpu %.1f%%\n", p.ItersPerSec, 100*p.TrainHosts.CPU, 100*p.TrainNodes.CPU)
	return nil
}

func idxRange(from, to int) []int {
	out := make([]int, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func pollAll(ctx context.Context, m *launch.Mesh, idx []int) []*status.Status {
	st, _ := pollAllErr(ctx, m, idx)
	return st
}

// pollAllErr reads every node's /status at once; errs[k] says why node
// idx[k] gave none.
func pollAllErr(ctx context.Context, m *launch.Mesh, idx []int) ([]*status.Status, []error) {
	out, errs := make([]*status.Status, len(idx)), make([]error, len(idx))
	done := make(chan struct{}, len(idx))
	for k, i := range idx {
		go func() {
			defer func() { done <- struct{}{} }()
			t := time.Now()
			s, err := nodeclient.FetchStatusWithin(ctx, m.Procs[i].HTTP, scalePollTimeout)
			if err != nil {
				errs[k] = fmt.Errorf("after %s: %w", time.Since(t).Round(100*time.Millisecond), err)
				return
			}
			out[k] = &s
		}()
	}
	for range idx {
		<-done
	}
	return out, errs
}

// silent names the nodes of a poll that gave no answer (nor a recent one
// in its place) and why, the first three.
func silent(idx []int, st []*status.Status, errs []error, missed []int) string {
	var parts []string
	n := 0
	for k, s := range st {
		if s != nil {
			continue
		}
		if n++; n <= 3 {
			parts = append(parts, fmt.Sprintf("node %d (%d polls missed): %v", idx[k], missed[k]+1, errs[k]))
		}
	}
	if n > 3 {
		parts = append(parts, fmt.Sprintf("and %d more", n-3))
	}
	return strings.Join(parts, "; ")
}

// waitConverged polls nodes idx until every one lists want members (first
// recorded in members, from t0) and then until one poll shows the mesh
// settled (see unsettled; recorded in led). A node that misses a poll is
// represented by its answer to one of the last maxMissed polls. It returns
// every shard's voters from that poll.
func waitConverged(ctx context.Context, m *launch.Mesh, idx []int, want, shards int, cfg ScaleConfig, t0 time.Time, members, led *time.Duration) (map[uint32][]string, error) {
	*members, *led = 0, 0
	deadline := t0.Add(cfg.Converge)
	r := min(cfg.Replication, want)
	last, missed := make([]*status.Status, len(idx)), make([]int, len(idx))
	for {
		for _, i := range idx {
			if err := m.Exited(i); err != nil {
				return nil, err
			}
		}
		polled, errs := pollAllErr(ctx, m, idx)
		st := fillMissed(polled, last, missed)
		now := time.Since(t0)
		if *members == 0 && allMembers(st, want) {
			*members = now
		}
		why := unsettled(st, want, shards, r)
		if why == didNotAnswer {
			why += ": " + silent(idx, st, errs, missed)
		}
		if *members > 0 && why == "" {
			*led = now
			return votersOf(st), nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("not converged within %v (members seen by all: %v; %s)", cfg.Converge, *members > 0, why)
		}
		if err := sleepCtx(ctx, cfg.Poll); err != nil {
			return nil, err
		}
	}
}

// maxMissed is how many polls in a row a node may miss (its /status slower
// than scalePollTimeout, as at N 32 × S 64 under load) while its last answer
// stands in for it.
const maxMissed = 3

// scalePollTimeout bounds one node's /status read in a poll. At N 32 × S 64
// the mesh's 35 processes load two cores to 50–85 and answers slower than
// the live display's 2 s came often enough that no poll ever settled.
const scalePollTimeout = 6 * time.Second

// fillMissed puts each node's last answer, kept in last, where this poll
// got none, for up to maxMissed polls in a row (counted in missed); it
// records this poll's answers in last.
func fillMissed(st, last []*status.Status, missed []int) []*status.Status {
	for k, s := range st {
		switch {
		case s != nil:
			last[k], missed[k] = s, 0
		case last[k] != nil && missed[k] < maxMissed:
			missed[k]++
			st[k] = last[k]
		}
	}
	return st
}

func allMembers(st []*status.Status, want int) bool {
	for _, s := range st {
		if s == nil || len(s.Members) != want {
			return false
		}
	}
	return true
}

// leaders returns, per shard, the status entry of the replica that says it
// leads (the highest term when two do).
func leaders(st []*status.Status) map[uint32]records.ShardStatus {
	out := map[uint32]records.ShardStatus{}
	for _, s := range st {
		if s == nil {
			continue
		}
		for _, sh := range s.Shards {
			if sh.Local != "leader" {
				continue
			}
			if cur, ok := out[sh.ID]; !ok || sh.Term > cur.Term {
				out[sh.ID] = sh
			}
		}
	}
	return out
}

// unsettled says why one poll does not show a settled mesh, "" when it
// does: every node answered and lists the same want members, and every
// shard has a leader whose Raft voters are the r replicas placement gives
// it over those members (mesh.PlaceAll). A leader's own
// placement follows its membership view, which under load can miss a
// node for a while; voters equal to that placement are not settled.
func unsettled(st []*status.Status, want, shards, r int) string {
	var ids []mesh.NodeID
	for _, s := range st {
		if s == nil {
			return didNotAnswer
		}
		cur := make([]mesh.NodeID, 0, len(s.Members))
		for _, mem := range s.Members {
			cur = append(cur, mesh.NodeID(mem.ID))
		}
		slices.Sort(cur)
		switch {
		case len(cur) != want:
			return fmt.Sprintf("%s lists %d members, want %d", s.Node, len(cur), want)
		case ids == nil:
			ids = cur
		case !slices.Equal(ids, cur):
			return fmt.Sprintf("%s lists other members than %s", s.Node, st[0].Node)
		}
	}
	if ids == nil {
		return "no status"
	}
	lead := leaders(st)
	placement := mesh.PlaceAll(shards, ids, r)
	for id := uint32(0); id < uint32(shards); id++ {
		sh, ok := lead[id]
		if !ok {
			return fmt.Sprintf("shard %d has no leader", id)
		}
		var place []string
		for _, n := range placement[id] {
			place = append(place, string(n))
		}
		switch {
		case !sameSet(sh.Placement, place):
			return fmt.Sprintf("shard %d: its leader places it on %v, the members on %v", id, sh.Placement, place)
		case !sameSet(sh.Voters, place):
			return fmt.Sprintf("shard %d voters %v, placement %v", id, sh.Voters, place)
		}
	}
	return ""
}

const didNotAnswer = "a node did not answer"

// rebinds is how many of nodes idx were restarted on fresh ports.
func rebinds(m *launch.Mesh, idx []int) int {
	n := 0
	for _, i := range idx {
		n += m.Rebinds(i)
	}
	return n
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

func votersOf(st []*status.Status) map[uint32][]string {
	out := map[uint32][]string{}
	for id, sh := range leaders(st) {
		out[id] = sh.Voters
	}
	return out
}

// moved counts the replicas in after's voter sets that were not in
// before's: the replicas that had to be created and caught up.
func moved(before, after map[uint32][]string) int {
	n := 0
	for id, vs := range after {
		for _, v := range vs {
			if !slices.Contains(before[id], v) {
				n++
			}
		}
	}
	return n
}

func meanGroups(st []*status.Status) float64 {
	var sum, n float64
	for _, s := range st {
		if s == nil {
			continue
		}
		n++
		for _, sh := range s.Shards {
			if sh.Local != "" {
				sum++
			}
		}
	}
	if n == 0 {
		return 0
	}
	return sum / n
}

// busiest returns the index in st of the node hosting the most replicas,
// and how many; -1 when no node answered.
func busiest(st []*status.Status) (int, int) {
	k, most := -1, -1
	for i, s := range st {
		if s == nil {
			continue
		}
		n := 0
		for _, sh := range s.Shards {
			if sh.Local != "" {
				n++
			}
		}
		if n > most {
			k, most = i, n
		}
	}
	return k, most
}

func ledBy(s *status.Status) int {
	n := 0
	for _, sh := range s.Shards {
		if sh.Local == "leader" {
			n++
		}
	}
	return n
}

func waitTraining(ctx context.Context, m *launch.Mesh, idx []int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		for _, i := range idx {
			if err := m.Exited(i); err != nil {
				return err
			}
		}
		ok := true
		var seen []string
		st, errs := pollAllErr(ctx, m, idx)
		for k, s := range st {
			switch {
			case s == nil:
				ok = false
				seen = append(seen, fmt.Sprintf("node %d: %v", idx[k], errs[k]))
			case s.Worker == nil || s.Worker.Iter < 2:
				ok = false
				seen = append(seen, describeTrainer(idx[k], s))
			}
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("trainers not iterating within %v (%s)", limit, strings.Join(seen, "; "))
		}
		if err := sleepCtx(ctx, time.Second); err != nil {
			return err
		}
	}
}

// describeTrainer says where a trainer that has not reached iteration 2
// stands: its phase, iteration, retries and last error.
func describeTrainer(i int, s *status.Status) string {
	if s.Worker == nil {
		return fmt.Sprintf("node %d: phase %s, no worker yet", i, s.Phase)
	}
	w := s.Worker
	return fmt.Sprintf("node %d: phase %s, iteration %d, %d retries, wait %.0f s, compute %.0f s, last error %q", i, s.Phase, w.Iter, w.Retries, w.WaitSeconds, w.ComputeSeconds, w.LastError)
}

// procSample is one node's counters at one instant.
type procSample struct {
	at         time.Time
	stat       launch.ProcStat
	gossip     float64
	heartbeats float64
	goroutines float64
}

func sampleNode(ctx context.Context, p *launch.Proc) (procSample, error) {
	s := procSample{at: time.Now()}
	st, ok := p.Stat()
	if !ok {
		return s, fmt.Errorf("node %d: no /proc stat (not running?)", p.Index)
	}
	s.stat = st
	m, err := scrapeMetrics(ctx, p.HTTP, "dssp_gossip_sent_bytes_total", "dssp_raft_heartbeats_total", "go_goroutines")
	if err != nil {
		return s, fmt.Errorf("node %d: %w", p.Index, err)
	}
	s.gossip, s.heartbeats, s.goroutines = m["dssp_gossip_sent_bytes_total"], m["dssp_raft_heartbeats_total"], m["go_goroutines"]
	return s, nil
}

// sampleRetries is how many times one node's sample is tried: a /metrics
// slower than metricsTimeout on a loaded machine is tried again (the
// counters are cumulative and the sample is timed where it succeeds).
const sampleRetries = 3

func sampleNodeRetry(ctx context.Context, p *launch.Proc) (procSample, error) {
	var s procSample
	var err error
	for range sampleRetries {
		if s, err = sampleNode(ctx, p); err == nil || ctx.Err() != nil {
			return s, err
		}
	}
	return s, fmt.Errorf("%d tries: %w", sampleRetries, err)
}

func sampleEach(ctx context.Context, m *launch.Mesh, idx []int, window time.Duration) ([]NodeCost, error) {
	first := make([]procSample, len(idx))
	for k, i := range idx {
		s, err := sampleNodeRetry(ctx, m.Procs[i])
		if err != nil {
			return nil, err
		}
		first[k] = s
	}
	if err := sleepCtx(ctx, window); err != nil {
		return nil, err
	}
	out := make([]NodeCost, len(idx))
	for k, i := range idx {
		s, err := sampleNodeRetry(ctx, m.Procs[i])
		if err != nil {
			return nil, err
		}
		dt := s.at.Sub(first[k].at).Seconds()
		rss := float64(s.stat.RSS) / (1 << 20)
		out[k] = NodeCost{Nodes: 1, RSS: rss, RSSMax: rss, CPU: (s.stat.CPU - first[k].stat.CPU).Seconds() / dt,
			GossipBps: (s.gossip - first[k].gossip) / dt, Heartbeats: (s.heartbeats - first[k].heartbeats) / dt, Goroutines: s.goroutines}
	}
	return out, nil
}

func sampleCosts(ctx context.Context, m *launch.Mesh, idx []int, window time.Duration) (NodeCost, error) {
	c, err := sampleEach(ctx, m, idx, window)
	if err != nil {
		return NodeCost{}, err
	}
	return meanCost(c), nil
}

func meanCost(cs []NodeCost) NodeCost {
	var out NodeCost
	for _, c := range cs {
		out.Nodes++
		out.RSS += c.RSS
		out.RSSMax = max(out.RSSMax, c.RSSMax)
		out.CPU += c.CPU
		out.CPUMax = max(out.CPUMax, c.CPU)
		out.HeartbeatsMax = max(out.HeartbeatsMax, c.Heartbeats)
		out.GossipBps += c.GossipBps
		out.Heartbeats += c.Heartbeats
		out.Goroutines += c.Goroutines
	}
	if out.Nodes > 0 {
		k := float64(out.Nodes)
		out.RSS /= k
		out.CPU /= k
		out.GossipBps /= k
		out.Heartbeats /= k
		out.Goroutines /= k
	}
	return out
}

const metricsTimeout = 5 * time.Second

// fetchProfile saves a CPU profile of the node at addr over d.
func fetchProfile(ctx context.Context, addr string, d time.Duration, path string) error {
	secs := max(1, int(d.Seconds()))
	b, err := nodeclient.Get(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs), d+10*time.Second)
	if err != nil {
		return fmt.Errorf("%w (run the nodes with --pprof)", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// scrapeMetrics reads the named metrics from a node's /metrics (Prometheus
// text), each summed over its label sets.
func scrapeMetrics(ctx context.Context, addr string, names ...string) (map[string]float64, error) {
	b, err := nodeclient.FetchMetrics(ctx, addr, metricsTimeout)
	if err != nil {
		return nil, err
	}
	return parseMetrics(bytes.NewReader(b), names...)
}

// parseMetrics sums the samples of each named metric in Prometheus text;
// a name absent from the text is an error.
func parseMetrics(r io.Reader, names ...string) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || l[0] == '#' {
			continue
		}
		name := l
		if i := strings.IndexAny(l, "{ "); i >= 0 {
			name = l[:i]
		}
		if !slices.Contains(names, name) {
			continue
		}
		rest := l[len(name):]
		if strings.HasPrefix(rest, "{") {
			rest = rest[strings.LastIndexByte(rest, '}')+1:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics: %q: %w", l, err)
		}
		out[name] += v
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for _, n := range names {
		if _, ok := out[n]; !ok {
			return nil, fmt.Errorf("metrics: no %s (a dssp node counts it)", n)
		}
	}
	return out, nil
}
