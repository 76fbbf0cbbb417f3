package launch

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"dsspmesh/mesh"
	"dsspmesh/node"
)

// Config is one `dssp up` run.
type Config struct {
	Binary string // the dssp binary to start (os.Executable())
	Nodes  int    // how many node processes
	// Workers is how many of the nodes train (the first Workers, the
	// bootstrap node included); the others only host shards (--train=false)
	// and never load the dataset. 0 means every node trains; AutoWorkers
	// (-1) as many as this machine's available memory holds (see
	// [FitWorkers]).
	Workers   int
	Dir       string    // run folder (data dirs, logs, key); "" = a temp folder, removed at the end unless the run fails (see Run)
	ReportDir string    // where the CSV and plots go
	Slowdown  []float64 // per-node --slowdown, cycled; nil = all 1
	TargetAcc float64   // stop when the mesh's test accuracy reaches this (0 = never)
	TimeLimit time.Duration
	// Chaos, if positive, kills a random non-bootstrap node every Chaos and
	// restarts it ChaosDown later on the same data dir and ports.
	Chaos     time.Duration
	ChaosDown time.Duration
	Seed      uint64 // chaos victims
	Poll      time.Duration
	// NodeArgs go to every node; SpecArgs (the job) only to the bootstrap
	// node, which is how a real mesh works: joiners adopt its spec.
	NodeArgs []string
	SpecArgs []string
	Out      io.Writer // progress view
	// Trainer, if set, is the command of one trainer process per training
	// node (Mesh.Trainer); the nodes then run --trainer external.
	Trainer string
	// Hosts, if set, places node i on Hosts[i] (one per node; the link
	// lab's hosts); nil: every node on loopback.
	Hosts []Host
}

// DefaultConfig is four nodes until 97% test accuracy or 30 minutes.
func DefaultConfig() Config {
	return Config{Nodes: 4, ReportDir: "report", TargetAcc: 0.97, TimeLimit: 30 * time.Minute,
		ChaosDown: 5 * time.Second, Seed: 1, Poll: time.Second}
}

// Validate names the first bad value.
func (c Config) Validate() error {
	switch {
	case c.Binary == "":
		return errors.New("up: no dssp binary to start")
	case c.Nodes < 1 || c.Nodes > 64:
		return fmt.Errorf("--nodes %d outside 1..64", c.Nodes)
	case c.Workers < AutoWorkers || c.Workers > c.Nodes:
		return fmt.Errorf("--workers %d outside -1..%d (--nodes; 0: every node trains, -1: as many as memory holds)", c.Workers, c.Nodes)
	case c.TargetAcc < 0 || c.TargetAcc > 1:
		return fmt.Errorf("--target-acc %g outside [0,1]", c.TargetAcc)
	case c.TimeLimit <= 0:
		return fmt.Errorf("--time-limit %v must be > 0", c.TimeLimit)
	case c.Chaos < 0:
		return fmt.Errorf("--chaos %v must be >= 0", c.Chaos)
	case c.Chaos > 0 && c.Nodes < 2:
		return fmt.Errorf("--chaos needs --nodes >= 2 (the bootstrap node is never killed), got %d", c.Nodes)
	case c.Chaos > 0 && (c.ChaosDown <= 0 || c.ChaosDown >= c.Chaos):
		return fmt.Errorf("--chaos-down %v must be > 0 and shorter than --chaos %v", c.ChaosDown, c.Chaos)
	case c.Poll <= 0:
		return fmt.Errorf("--poll %v must be > 0", c.Poll)
	case c.ReportDir == "":
		return errors.New("--report must not be empty")
	case len(c.Hosts) > 0 && len(c.Hosts) != c.Nodes:
		return fmt.Errorf("up: %d hosts for %d nodes (one host a node)", len(c.Hosts), c.Nodes)
	}
	for _, s := range c.Slowdown {
		if err := node.CheckSlowdown(s); err != nil {
			return err
		}
	}
	return nil
}

// Host is where a node runs: the address it binds and announces (gossip,
// QUIC), the host of its HTTP address, and a command prefix that runs a
// process there (nil: on this machine as it is). A Host{} is loopback.
// The link lab (lab/netlab) gives each node a network namespace of its
// own: Exec is `ip netns exec <ns>`.
type Host struct {
	Addr     string
	HTTPHost string
	Exec     []string
}

func (h Host) addr() string {
	if h.Addr == "" {
		return "127.0.0.1"
	}
	return h.Addr
}

func (h Host) httpHost() string {
	if h.HTTPHost == "" {
		return h.addr()
	}
	return h.HTTPHost
}

// Proc is one child node process.
type Proc struct {
	Index   int
	DataDir string
	Gossip  string
	QUIC    string
	HTTP    string
	LogPath string
	Host    Host

	args   []string
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // why it exited, valid once exited is closed
	// starts counts Start calls, bindFails the starts that ended on a
	// port already in use; logOff is the log's size when the process last
	// started (its own lines follow).
	starts, bindFails int
	logOff            int64

	trainer     *exec.Cmd     // the node's trainer process (Mesh.Trainer), nil when none runs
	trainerDone chan struct{} // closed when it has exited
	// trainerExit is how and when the trainer exited of its own accord
	// (nil while it runs, or once stopTrainer ended it with its node).
	trainerExit atomic.Pointer[trainerExit]
	trainerLog  string
}

type trainerExit struct {
	err error
	at  time.Time
}

// Trains reports whether node p runs a worker (false: it only hosts shards).
func (p *Proc) Trains() bool { return !slices.Contains(p.args, "--train=false") }

// Pid is the running process's id, 0 when it is not running.
func (p *Proc) Pid() int {
	if !p.Alive() {
		return 0
	}
	return p.cmd.Process.Pid
}

// Alive reports whether the process is running.
func (p *Proc) Alive() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Mesh is a set of node processes on loopback sharing one mesh key.
type Mesh struct {
	Binary string
	Dir    string
	Key    string
	Procs  []*Proc
	// Trainer, if set, is a shell command started beside every training
	// node (`dssp up --trainer`): env DSSP_TRAINER_SOCKET is the node's
	// trainer socket, DSSP_NODE_INDEX its index, DSSP_DATA the --data
	// folder when one is given; its output goes to trainer<i>.log in the
	// run folder, and it is killed when its node exits.
	Trainer string
	log     *slog.Logger
}

// NewMesh prepares n nodes under dir: a mesh key, a data folder and free
// loopback ports for each, all 3n distinct (drawn in one [FreePorts] call:
// drawn per node, two nodes of a 32-node mesh shared a port about one run
// in three). Nothing runs until Start.
func NewMesh(binary, dir string, n int, log *slog.Logger) (*Mesh, error) {
	return NewMeshOn(binary, dir, make([]Host, n), log)
}

// NewMeshOn is NewMesh with node i on hosts[i].
func NewMeshOn(binary, dir string, hosts []Host, log *slog.Logger) (*Mesh, error) {
	n := len(hosts)
	m := &Mesh{Binary: binary, Dir: dir, Key: filepath.Join(dir, "mesh.key"), log: log}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("up: run folder %s: %w", dir, err)
	}
	if _, err := os.Stat(m.Key); errors.Is(err, os.ErrNotExist) {
		if err := mesh.WriteKeyFile(m.Key); err != nil {
			return nil, err
		}
	}
	all, err := FreePorts(3 * n)
	if err != nil {
		return nil, err
	}
	for i := 0; i < n; i++ {
		ports := all[3*i : 3*i+3]
		p := &Proc{
			Index:   i,
			DataDir: filepath.Join(dir, fmt.Sprintf("node%d", i)),
			LogPath: filepath.Join(dir, fmt.Sprintf("node%d.log", i)),
			Host:    hosts[i],
		}
		p.args = []string{"node", "--data-dir", p.DataDir, "--host", p.Host.addr(), "--key", m.Key}
		p.setPorts(ports)
		if i > 0 {
			p.args = append(p.args, "--join", m.Procs[0].Gossip)
		}
		m.Procs = append(m.Procs, p)
	}
	return m, nil
}

// SetJoin replaces node i's --join seeds (before it starts).
func (m *Mesh) SetJoin(i int, seeds ...string) {
	var args []string
	for j := 0; j < len(m.Procs[i].args); j++ {
		if m.Procs[i].args[j] == "--join" {
			j++
			continue
		}
		args = append(args, m.Procs[i].args[j])
	}
	for _, s := range seeds {
		args = append(args, "--join", s)
	}
	m.Procs[i].args = args
}

// AddArgs appends flags to node i's command line (before it starts).
func (m *Mesh) AddArgs(i int, args ...string) { m.Procs[i].args = append(m.Procs[i].args, args...) }

// Start starts node i (again, after a kill: same data dir and ports). Its
// output goes to its log file.
func (m *Mesh) Start(i int) error {
	p := m.Procs[i]
	if p.Alive() {
		return fmt.Errorf("up: node %d already running", i)
	}
	logf, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("up: node %d log: %w", i, err)
	}
	if fi, err := logf.Stat(); err == nil {
		p.logOff = fi.Size()
	}
	argv := append(slices.Clone(p.Host.Exec), m.Binary)
	cmd := exec.Command(argv[0], append(argv[1:], p.args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// The children must not outlive the launcher, even if it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("up: start node %d: %w", i, err)
	}
	p.cmd, p.exited = cmd, make(chan struct{})
	p.starts++
	if m.Trainer != "" && p.Trains() {
		if err := m.startTrainer(p); err != nil {
			m.log.Warn("trainer not started", "node", i, "err", err)
		}
	}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		m.stopTrainer(p)
		close(p.exited)
	}()
	m.log.Debug("node started", "node", i, "pid", cmd.Process.Pid, "http", p.HTTP)
	return nil
}

// TrainerSocket is the trainer socket in a node's data dir.
func (p *Proc) TrainerSocket() string { return filepath.Join(p.DataDir, node.TrainerSocket) }

// startTrainer starts p's trainer: Mesh.Trainer through sh -c, in its own
// process group (stopTrainer kills the whole group).
func (m *Mesh) startTrainer(p *Proc) error {
	logPath := filepath.Join(m.Dir, fmt.Sprintf("trainer%d.log", p.Index))
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("up: trainer %d log: %w", p.Index, err)
	}
	cmd := exec.Command("sh", "-c", m.Trainer)
	cmd.Env = append(os.Environ(), "DSSP_TRAINER_SOCKET="+p.TrainerSocket(), fmt.Sprintf("DSSP_NODE_INDEX=%d", p.Index))
	for j, a := range p.args {
		if a == "--data" && j+1 < len(p.args) {
			cmd.Env = append(cmd.Env, "DSSP_DATA="+p.args[j+1])
		} else if v, ok := strings.CutPrefix(a, "--data="); ok {
			cmd.Env = append(cmd.Env, "DSSP_DATA="+v)
		}
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("up: start trainer %d (%s): %w", p.Index, m.Trainer, err)
	}
	done := make(chan struct{})
	p.trainerExit.Store(nil)
	go func() {
		err := cmd.Wait()
		p.trainerExit.CompareAndSwap(nil, &trainerExit{err: err, at: time.Now()})
		logf.Close()
		close(done)
	}()
	p.trainer, p.trainerDone, p.trainerLog = cmd, done, logPath
	m.log.Debug("trainer started", "node", p.Index, "pid", cmd.Process.Pid)
	return nil
}

// stopTrainer ends p's trainer once its node exited: SIGTERM to its
// process group, SIGKILL after 2 s. A trainer told "stop" by its node
// has usually exited already.
func (m *Mesh) stopTrainer(p *Proc) {
	t := p.trainer
	if t == nil {
		return
	}
	done := p.trainerDone
	p.trainer, p.trainerDone = nil, nil
	p.trainerExit.CompareAndSwap(nil, &trainerExit{}) // ended with its node: not an exit of its own
	pgid := t.Process.Pid
	syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(2 * time.Second):
	}
	syscall.Kill(-pgid, syscall.SIGKILL) // what the group leader left behind
}

// Kill sends SIGKILL to node i and waits for it to exit.
func (m *Mesh) Kill(i int) error {
	p := m.Procs[i]
	if !p.Alive() {
		return fmt.Errorf("up: node %d is not running", i)
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
	return nil
}

// Terminate sends SIGTERM to node i (a graceful leave) and waits for it to
// exit, sending SIGKILL after grace.
func (m *Mesh) Terminate(i int, grace time.Duration) error {
	p := m.Procs[i]
	if !p.Alive() {
		return fmt.Errorf("up: node %d is not running", i)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
	}
	return nil
}

// Stop sends SIGTERM to every live node and SIGKILL to those still running
// after grace.
func (m *Mesh) Stop(grace time.Duration) {
	var wg sync.WaitGroup
	for i, p := range m.Procs {
		if p.Alive() {
			wg.Go(func() { m.Terminate(i, grace) }) // one that exited meanwhile: nothing to stop
		}
	}
	wg.Wait()
}

// Exited returns the exit error of a node that stopped, with the tail of its
// log, or nil while it runs.
func (m *Mesh) Exited(i int) error {
	p := m.Procs[i]
	if p.cmd == nil || p.Alive() {
		return nil
	}
	return fmt.Errorf("node %d exited (%v): %s", i, p.err, LogTail(p.LogPath, 3))
}

// TrainerExited returns an error when node i's trainer exited of its own
// accord at least a second ago while its node runs (a trainer ends with
// its node, or after the node told it to stop): the trainer's status, the
// last lines of its log and, for a Python without PyTorch or numpy, the
// package that provides it.
func (m *Mesh) TrainerExited(i int) error {
	p := m.Procs[i]
	x := p.trainerExit.Load()
	if x == nil || x.at.IsZero() || time.Since(x.at) < time.Second || !p.Alive() {
		return nil
	}
	how := "exited"
	if x.err != nil {
		how = fmt.Sprintf("exited (%v)", x.err)
	}
	tail := LogTail(p.trainerLog, 8)
	msg := fmt.Sprintf("trainer %d (%s) %s while its node runs; the last lines of %s:\n  %s", i, m.Trainer, how, p.trainerLog,
		strings.ReplaceAll(tail, " | ", "\n  "))
	for mod, pkg := range map[string]string{"torch": "python3-torch", "numpy": "python3-numpy"} {
		if strings.Contains(tail, "No module named '"+mod+"'") {
			msg += fmt.Sprintf("\nthe trainer's Python has no %s: on Debian apt-get install %s and run the trainer with /usr/bin/python3 (elsewhere: pip install %s)", mod, pkg, mod)
		}
	}
	return errors.New(msg)
}

// LogTail returns the last n lines of a log file, for error messages.
func LogTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := splitLines(string(b))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	out := ""
	for i, l := range lines {
		if i > 0 {
			out += " | "
		}
		out += l
	}
	return out
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

func pick(r *rand.Rand, alive []int) int { return alive[r.IntN(len(alive))] }
