package launch

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"dsspmesh/modelfile"
	"dsspmesh/node/records"
	"dsspmesh/node/status"
	"dsspmesh/nodeclient"
)

// Sample is one poll of one node.
type Sample struct {
	Elapsed time.Duration
	Node    int
	ID      string
	Up      bool
	Worker  records.LocalWorker
	// Trainer is the node's trainer socket and the bridge's cost per
	// iteration under --trainer external (/status trainer); nil otherwise.
	Trainer *status.ExternalTrainer
}

// EvalPoint is one evaluation of the global parameters.
type EvalPoint struct {
	Elapsed  time.Duration
	Accuracy float64
	Loss     float64
	By       string
}

// ChaosEvent is one kill and restart.
type ChaosEvent struct {
	Node   int
	ID     string
	Killed time.Duration // since the start of the run
	// Recovered is how long after the kill a survivor first showed every
	// shard led by a live node and the victim gone from its clock table;
	// Resumed how long until every survivor's worker completed an iteration
	// after that. Rejoined is how long after the restart the victim's own
	// worker completed an iteration. Zero while not (yet) observed.
	Recovered time.Duration
	Resumed   time.Duration
	Restarted time.Duration
	Rejoined  time.Duration

	itersAtRecovery map[int]uint64
	iterAtRestart   uint64
	restartSeen     bool
}

// Result is what a run observed.
type Result struct {
	Elapsed   time.Duration
	Reached   bool    // the target accuracy was reached
	TargetAcc float64 // the target (Config.TargetAcc; 0: none)
	// Interrupted says the run was stopped by its context (Ctrl-C,
	// SIGTERM) before the target or the time limit.
	Interrupted bool
	// KeptDir is the temporary run folder (data dirs, node*.log) kept
	// because the run failed, was interrupted or missed its target; ""
	// when it was removed or Config.Dir named the folder.
	KeptDir   string
	Final     *EvalPoint
	Samples   []Sample
	Evals     []EvalPoint
	Chaos     []ChaosEvent
	ReportDir string
	// Model is the path of the model file written with the report ("" if
	// none could be fetched), ModelMeta what it says.
	Model     string
	ModelMeta *modelfile.Meta
	// PeakRSS is each node's highest resident memory (Linux's VmHWM) seen
	// while it ran, the largest over its restarts; Trains whether it ran a
	// worker. 0 where /proc could not be read.
	PeakRSS []int64
	Trains  []bool
	// Learning is the learning check's last warning seen ("" if none):
	// the job was not learning, or diverging, at some point of the run.
	Learning string
	// Startup is the time from the run's start (before the first node
	// process) to the start of the clock of Elapsed, Evals and Samples (every
	// node started): a figure "from process start" adds it.
	Startup time.Duration
}

// PeakRSSLines lists each node's peak resident memory, one line per node,
// then one line with the largest and the mean per role.
func (r *Result) PeakRSSLines() []string {
	var out []string
	var sum, n [2]int64
	var top [2]int64
	for i, b := range r.PeakRSS {
		role, k := "hosts shards", 0
		if r.Trains[i] {
			role, k = "trains, hosts shards", 1
		}
		out = append(out, fmt.Sprintf("node%-2d %5s MiB  (%s)", i, MiB(b), role))
		if b > 0 {
			sum[k] += b
			n[k]++
			top[k] = max(top[k], b)
		}
	}
	for k, role := range []string{"host-only", "training"} {
		if n[k] > 0 {
			out = append(out, fmt.Sprintf("%d %s nodes: peak RSS mean %s MiB, max %s MiB", n[k], role, MiB(sum[k]/n[k]), MiB(top[k])))
		}
	}
	return out
}

// Run starts the mesh, watches it until the target, the time limit or ctx,
// stops it and writes the report. Without Config.Dir the run folder is a
// temporary one, removed when the run succeeds and kept (Result.KeptDir,
// and a line on Config.Out) when it fails, is interrupted or misses its
// target, so the nodes' logs can be read.
func Run(ctx context.Context, cfg Config, log *slog.Logger) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Dir != "" {
		return run(ctx, cfg, cfg.Dir, "", log)
	}
	tmp, err := os.MkdirTemp("", "dssp-up-*")
	if err != nil {
		return nil, fmt.Errorf("up: temp folder: %w", err)
	}
	res, err := run(ctx, cfg, tmp, "removed at the end unless the run fails", log)
	if err == nil && res != nil && !res.Interrupted && (cfg.TargetAcc == 0 || res.Reached) {
		os.RemoveAll(tmp)
		return res, nil
	}
	fmt.Fprintf(cfg.Out, "the run folder %s is kept: the nodes' logs are %s; delete it when done\n", tmp, filepath.Join(tmp, "node*.log"))
	if res == nil {
		res = &Result{}
	}
	res.KeptDir = tmp
	return res, err
}

// run is Run in the run folder dir; tmpNote says what becomes of a
// temporary one.
func run(ctx context.Context, cfg Config, dir, tmpNote string, log *slog.Logger) (*Result, error) {
	begin := time.Now()
	if cfg.Workers == AutoWorkers {
		avail := MemAvailable()
		cfg.Workers = FitWorkers(cfg.Nodes, avail)
		if cfg.Workers < cfg.Nodes {
			fmt.Fprintf(cfg.Out, "%d trainers (~%s MiB each) and %d hosts (~%s MiB) fit in the %s MiB available: the first %d nodes train (set --workers to choose)\n",
				cfg.Workers, MiB(TrainerBytes), cfg.Nodes-cfg.Workers, MiB(HostBytes), MiB(avail), cfg.Workers)
		}
	}
	hosts, where := cfg.Hosts, fmt.Sprintf("%d hosts", len(cfg.Hosts))
	if len(hosts) == 0 {
		hosts, where = make([]Host, cfg.Nodes), "loopback"
	}
	m, err := NewMeshOn(cfg.Binary, dir, hosts, log)
	if err != nil {
		return nil, err
	}
	m.Trainer = cfg.Trainer
	for i := range m.Procs {
		if cfg.Workers > 0 && i >= cfg.Workers {
			m.AddArgs(i, "--train=false")
		}
		if len(cfg.Slowdown) > 0 {
			m.AddArgs(i, "--slowdown", strconv.FormatFloat(cfg.Slowdown[i%len(cfg.Slowdown)], 'g', -1, 64))
		}
		m.AddArgs(i, cfg.NodeArgs...)
	}
	m.AddArgs(0, cfg.SpecArgs...)
	defer m.Stop(10 * time.Second)

	out := cfg.Out
	trainers := cfg.Nodes
	if cfg.Workers > 0 {
		trainers = cfg.Workers
	}
	logs := "logs: node*.log"
	if cfg.Trainer != "" {
		logs += ", trainer*.log"
	}
	if tmpNote != "" {
		logs += "; " + tmpNote
	}
	fmt.Fprintf(out, "starting %d dssp nodes on %s in %s (%s); %d train, %d only host shards\n", cfg.Nodes, where, dir, logs, trainers, cfg.Nodes-trainers)
	if err := m.Start(0); err != nil {
		return nil, err
	}
	// Joiners need the bootstrap node's gossip port open.
	if err := m.WaitUp(ctx, []int{0}, 60*time.Second); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "dashboard: http://%s/ (any node's HTTP address serves one; dssp status --node %s)\n", m.Procs[0].HTTP, m.Procs[0].HTTP)
	for i := 1; i < cfg.Nodes; i++ {
		if err := m.Start(i); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	// A node whose port was taken between NewMesh and its bind starts
	// again on fresh ports here.
	if err := m.WaitUp(ctx, idxRange(1, cfg.Nodes), 2*time.Minute); err != nil {
		return nil, err
	}
	w := &watcher{cfg: cfg, mesh: m, start: start, view: newView(out), rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed))}
	w.res.TargetAcc = cfg.TargetAcc
	w.res.Startup = start.Sub(begin)
	w.res.PeakRSS = make([]int64, cfg.Nodes)
	for _, p := range m.Procs {
		w.res.Trains = append(w.res.Trains, p.Trains())
	}
	res, err := w.loop(ctx)
	if err != nil {
		return res, err
	}
	model, meta := w.finalModel()
	w.sampleRSS()
	m.Stop(10 * time.Second)
	if err := writeReport(cfg.ReportDir, res); err != nil {
		return res, err
	}
	res.ReportDir = cfg.ReportDir
	if model != nil {
		path := filepath.Join(cfg.ReportDir, "model.safetensors")
		if err := modelfile.WriteAtomic(path, model); err != nil {
			return res, fmt.Errorf("up: %w", err)
		}
		res.Model, res.ModelMeta = path, meta
	}
	return res, nil
}

// finalModel fetches the model to keep while the mesh still runs: the
// snapshot behind the last evaluation the mesh reported, from the node
// that made it, so `dssp eval` on the file reproduces that accuracy; a
// fresh export from any node if that fails. It returns nil when no node
// answers.
func (w *watcher) finalModel() ([]byte, *modelfile.Meta) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st := w.poll(ctx)
	if f := w.res.Final; f != nil {
		for i, s := range st {
			if s == nil || s.Node != f.By {
				continue
			}
			b, file, err := nodeclient.FetchModel(ctx, w.mesh.Procs[i].HTTP, true, 0)
			if err == nil {
				return b, &file.Meta
			}
			fmt.Fprintf(w.cfg.Out, "model: the evaluated snapshot from node%d: %v; exporting a fresh one\n", i, err)
		}
	}
	for i, s := range st {
		if s == nil {
			continue
		}
		b, file, err := nodeclient.FetchModel(ctx, w.mesh.Procs[i].HTTP, false, 30*time.Second)
		if err == nil {
			return b, &file.Meta
		}
		fmt.Fprintf(w.cfg.Out, "model: export from node%d: %v\n", i, err)
	}
	return nil, nil
}

type watcher struct {
	cfg   Config
	mesh  *Mesh
	start time.Time
	view  *view
	rng   *rand.Rand
	res   Result

	nextChaos   time.Time
	pendingBack []pendingRestart
	lastEvalAt  time.Time
	learning    string // the learning check's warning last printed
}

type pendingRestart struct {
	node  int
	at    time.Time
	event int
}

func (w *watcher) loop(ctx context.Context) (*Result, error) {
	tick := time.NewTicker(w.cfg.Poll)
	defer tick.Stop()
	if w.cfg.Chaos > 0 {
		w.nextChaos = w.start.Add(w.cfg.Chaos)
	}
	for {
		select {
		case <-ctx.Done():
			w.finish()
			w.res.Interrupted = true
			fmt.Fprintf(w.cfg.Out, "interrupted after %s", w.res.Elapsed.Round(100*time.Millisecond))
			if f := w.res.Final; f != nil {
				fmt.Fprintf(w.cfg.Out, " at %.2f%% test accuracy", 100*f.Accuracy)
			}
			fmt.Fprintln(w.cfg.Out)
			return &w.res, nil
		case <-tick.C:
		}
		now := time.Now()
		statuses := w.poll(ctx)
		w.sampleRSS()
		w.record(now, statuses)
		w.chaos(now, statuses)
		w.view.render(w, now, statuses)
		w.warnLearning(statuses)
		if err := w.mesh.Exited(0); err != nil {
			w.finish()
			return &w.res, fmt.Errorf("up: the bootstrap %w", err)
		}
		for i := range w.mesh.Procs {
			if err := w.mesh.TrainerExited(i); err != nil {
				w.finish()
				return &w.res, fmt.Errorf("up: %w", err)
			}
		}
		if f := w.res.Final; f != nil && w.cfg.TargetAcc > 0 && f.Accuracy >= w.cfg.TargetAcc {
			w.res.Reached = true
			w.finish()
			fmt.Fprintf(w.cfg.Out, "reached %.2f%% test accuracy (target %.2f%%) after %s\n",
				100*f.Accuracy, 100*w.cfg.TargetAcc, f.Elapsed.Round(100*time.Millisecond))
			return &w.res, nil
		}
		if now.Sub(w.start) >= w.cfg.TimeLimit {
			w.finish()
			fmt.Fprintf(w.cfg.Out, "time limit %v reached", w.cfg.TimeLimit)
			if f := w.res.Final; f != nil {
				fmt.Fprintf(w.cfg.Out, " at %.2f%% test accuracy", 100*f.Accuracy)
			}
			fmt.Fprintln(w.cfg.Out)
			return &w.res, nil
		}
	}
}

func (w *watcher) finish() { w.res.Elapsed = time.Since(w.start) }

// warnLearning prints the mesh's learning check (/status learning) when
// it changes: a job that does not learn says so at once, not at its time
// limit.
func (w *watcher) warnLearning(st []*status.Status) {
	for _, s := range st {
		if s == nil || s.Learning == w.learning {
			continue
		}
		if s.Learning != "" {
			fmt.Fprintf(w.cfg.Out, "WARNING: %s\n", s.Learning)
			w.res.Learning = s.Learning
		} else if w.learning != "" {
			fmt.Fprintln(w.cfg.Out, "the job learns again")
		}
		w.learning = s.Learning
		return
	}
}

// sampleRSS keeps each running node's peak resident memory. A process's
// VmHWM is its own peak so far, so the largest reading over the run (and
// over restarts, which start a new process) is the node's peak.
func (w *watcher) sampleRSS() {
	for i, p := range w.mesh.Procs {
		if s, ok := p.Stat(); ok {
			w.res.PeakRSS[i] = max(w.res.PeakRSS[i], s.PeakRSS)
		}
	}
}

func (w *watcher) poll(ctx context.Context) []*status.Status {
	out := make([]*status.Status, len(w.mesh.Procs))
	var wg sync.WaitGroup
	for i, p := range w.mesh.Procs {
		if !p.Alive() {
			continue
		}
		wg.Go(func() {
			if s, err := nodeclient.FetchStatus(ctx, p.HTTP); err == nil {
				out[i] = &s
			}
		})
	}
	wg.Wait()
	return out
}

func (w *watcher) record(now time.Time, st []*status.Status) {
	el := now.Sub(w.start)
	var latest *records.EvalResult
	for i, s := range st {
		smp := Sample{Elapsed: el, Node: i, Up: s != nil}
		if s != nil {
			smp.ID = s.Node
			if s.Worker != nil {
				smp.Worker = *s.Worker
			}
			smp.Trainer = s.Trainer
			if s.Eval != nil && (latest == nil || s.Eval.At.After(latest.At)) {
				latest = s.Eval
			}
		}
		w.res.Samples = append(w.res.Samples, smp)
	}
	if latest != nil && latest.At.After(w.lastEvalAt) {
		w.lastEvalAt = latest.At
		p := EvalPoint{Elapsed: latest.At.Sub(w.start), Accuracy: latest.Accuracy, Loss: latest.Loss, By: latest.By}
		w.res.Evals = append(w.res.Evals, p)
		w.res.Final = &p
	}
}

// chaos kills and restarts nodes and measures recoveries.
func (w *watcher) chaos(now time.Time, st []*status.Status) {
	if w.cfg.Chaos <= 0 {
		return
	}
	el := now.Sub(w.start)
	for k := range w.res.Chaos {
		w.observeRecovery(&w.res.Chaos[k], el, st)
	}
	var keep []pendingRestart
	for _, p := range w.pendingBack {
		if now.Before(p.at) {
			keep = append(keep, p)
			continue
		}
		if err := w.mesh.Start(p.node); err != nil {
			fmt.Fprintf(w.cfg.Out, "chaos: restart node %d: %v\n", p.node, err)
			continue
		}
		w.res.Chaos[p.event].Restarted = el
	}
	w.pendingBack = keep
	if now.Before(w.nextChaos) {
		return
	}
	w.nextChaos = now.Add(w.cfg.Chaos)
	var alive []int
	for i := 1; i < len(w.mesh.Procs); i++ {
		if w.mesh.Procs[i].Alive() && st[i] != nil {
			alive = append(alive, i)
		}
	}
	if len(alive) == 0 {
		return
	}
	victim := pick(w.rng, alive)
	ev := ChaosEvent{Node: victim, ID: st[victim].Node, Killed: el}
	if err := w.mesh.Kill(victim); err != nil {
		return
	}
	w.res.Chaos = append(w.res.Chaos, ev)
	w.pendingBack = append(w.pendingBack, pendingRestart{node: victim, at: now.Add(w.cfg.ChaosDown), event: len(w.res.Chaos) - 1})
}

func (w *watcher) observeRecovery(ev *ChaosEvent, el time.Duration, st []*status.Status) {
	if ev.Recovered == 0 {
		for i, s := range st {
			if s == nil || i == ev.Node || !Recovered(s, ev.ID) {
				continue
			}
			ev.Recovered = el - ev.Killed
			ev.itersAtRecovery = map[int]uint64{}
			for j, s2 := range st {
				if s2 != nil && j != ev.Node && s2.Worker != nil {
					ev.itersAtRecovery[j] = s2.Worker.Iter
				}
			}
			break
		}
	} else if ev.Resumed == 0 {
		all := true
		for j, it := range ev.itersAtRecovery {
			if st[j] == nil || st[j].Worker == nil || st[j].Worker.Iter <= it {
				all = false
			}
		}
		if all {
			ev.Resumed = el - ev.Killed
		}
	}
	if ev.Restarted > 0 && ev.Rejoined == 0 {
		if s := st[ev.Node]; s != nil && s.Worker != nil && s.Phase == "training" {
			if !ev.restartSeen {
				ev.restartSeen, ev.iterAtRestart = true, s.Worker.Iter
			} else if s.Worker.Iter > ev.iterAtRestart {
				ev.Rejoined = el - ev.Restarted
			}
		}
	}
}

// Recovered reports whether, in s, every shard has a live leader and the
// worker dead is no longer in the clock table.
func Recovered(s *status.Status, dead string) bool {
	live := map[string]bool{}
	for _, m := range s.Members {
		live[m.ID] = true
	}
	if live[dead] || len(s.Shards) == 0 {
		return false
	}
	for _, sh := range s.Shards {
		if sh.Leader == "" || !live[sh.Leader] {
			return false
		}
	}
	for _, wk := range s.Workers {
		if wk.ID == dead {
			return false
		}
	}
	return len(s.Workers) > 0
}

// view is the live progress display: redrawn in place on a terminal,
// printed every few seconds otherwise.
type view struct {
	w     io.Writer
	tty   bool
	lines int
	last  time.Time
}

func newView(w io.Writer) *view {
	v := &view{w: w}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			v.tty = true
		}
	}
	return v
}

func (v *view) render(wt *watcher, now time.Time, st []*status.Status) {
	if !v.tty && now.Sub(v.last) < 5*time.Second {
		return
	}
	v.last = now
	var b strings.Builder
	el := now.Sub(wt.start).Round(time.Second)
	acc := "—"
	if f := wt.res.Final; f != nil {
		acc = fmt.Sprintf("%.2f%% (by %s)", 100*f.Accuracy, f.By)
	}
	fmt.Fprintf(&b, "%s  test accuracy %s  target %.2f%%\n", el, acc, 100*wt.cfg.TargetAcc)
	var maxIter uint64 = 1
	for _, s := range st {
		if s != nil && s.Worker != nil && s.Worker.Iter > maxIter {
			maxIter = s.Worker.Iter
		}
	}
	for i, s := range st {
		if s == nil {
			fmt.Fprintf(&b, "  node%-2d %-14s down\n", i, "")
			continue
		}
		if s.Worker == nil {
			phase := s.Phase
			if phase == "hosting" {
				phase = "hosting shards, not training"
			}
			fmt.Fprintf(&b, "  node%-2d %-14s %s  peak rss %s MiB\n", i, s.Node, phase, MiB(wt.res.PeakRSS[i]))
			continue
		}
		wk := s.Worker
		const width = 24
		filled := int(width * wk.Iter / maxIter)
		wait := 0.0
		if t := wk.ComputeSeconds + wk.WaitSeconds; t > 0 {
			wait = 100 * wk.WaitSeconds / t
		}
		fmt.Fprintf(&b, "  node%-2d %-14s %s%s iter %6d  %6.1f it/s  wait %4.1f%%  loss %s  %s  peak rss %s MiB\n",
			i, s.Node, strings.Repeat("█", filled), strings.Repeat("·", width-filled),
			wk.Iter, wk.ItersPerSec, wait, lossText(wk.Loss, s.Trainer != nil), s.Phase, MiB(wt.res.PeakRSS[i]))
	}
	for _, ev := range wt.res.Chaos {
		fmt.Fprintf(&b, "  chaos: %s\n", ev.summary())
	}
	text := b.String()
	if v.tty && v.lines > 0 {
		fmt.Fprintf(v.w, "\x1b[%dA\x1b[J", v.lines)
	}
	v.lines = strings.Count(text, "\n")
	fmt.Fprint(v.w, text)
}

func (ev ChaosEvent) summary() string {
	d := func(x time.Duration) string {
		if x == 0 {
			return "—"
		}
		return x.Round(100 * time.Millisecond).String()
	}
	return fmt.Sprintf("killed node%d (%s) at %s: recovered after %s, survivors training after %s; restarted at %s, rejoined after %s",
		ev.Node, ev.ID, d(ev.Killed), d(ev.Recovered), d(ev.Resumed), d(ev.Restarted), d(ev.Rejoined))
}

// Summary lists the chaos events, one per line.
func (r *Result) Summary() []string {
	var out []string
	for _, ev := range r.Chaos {
		out = append(out, ev.summary())
	}
	return slices.Clip(out)
}

// idxRange is from, from+1, ..., to-1.
func idxRange(from, to int) []int {
	out := make([]int, 0, max(0, to-from))
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

// lossText is a worker's training loss for the progress line: "—" for an
// external trainer that sends none (its loop gives step() no loss: 0 on
// the wire, dsspmesh's send_update).
func lossText(loss float64, external bool) string {
	if loss == 0 && external {
		return "    —"
	}
	return fmt.Sprintf("%.3f", loss)
}
