package test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"dsspmesh/modelfile/modelfiletest"
	"dsspmesh/node/launch"
)

// pyTrainers runs one Python trainer process per node of a Cluster, each
// attached to its node's trainer socket (<data dir>/trainer.sock, in
// DSSP_TRAINER_SOCKET, as `dssp up --trainer` sets it) and logging to a
// file whose tail a failed test prints. The interpreter is the one
// internal/python.Find names (through modelfiletest.PythonWith).
type pyTrainers struct {
	t     testing.TB
	py    string
	root  string // the repository
	c     *Cluster
	procs map[int]*pyProc // the running (or exited) trainer per node; none after Kill
	logs  map[int]string
	start map[int]int      // starts per node, for log names
	all   []string         // every trainer log, in start order
	args  map[int][]string // the script and its arguments per node, for Restart
}

func newPyTrainers(t testing.TB, c *Cluster) *pyTrainers {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	p := &pyTrainers{t: t, py: modelfiletest.PythonWith(t, "numpy", "torch"), root: root, c: c,
		procs: map[int]*pyProc{}, logs: map[int]string{},
		start: map[int]int{}, args: map[int][]string{}}
	t.Cleanup(func() {
		for i := range p.procs {
			p.Kill(i)
		}
		if t.Failed() {
			for i, l := range p.logs {
				t.Logf("trainer%d log tail: %s", i, launch.LogTail(l, 15))
			}
		}
	})
	return p
}

func (p *pyTrainers) command(i int, args ...string) *exec.Cmd {
	cmd := exec.Command(p.py, args...)
	cmd.Dir = p.root
	cmd.Env = append(os.Environ(), "DSSP_TRAINER_SOCKET="+p.c.Mesh.Procs[i].TrainerSocket(), "PYTHONPATH="+filepath.Join(p.root, "python"),
		"PYTHONDONTWRITEBYTECODE=1", "OMP_NUM_THREADS=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// Start starts the trainer of node i: the script (relative to the
// repository) with args.
func (p *pyTrainers) Start(i int, script string, args ...string) {
	p.t.Helper()
	p.start[i]++
	p.args[i] = append([]string{script}, args...)
	log := filepath.Join(p.t.TempDir(), fmt.Sprintf("trainer%d-%d.log", i, p.start[i]))
	f, err := os.Create(log)
	if err != nil {
		p.t.Fatal(err)
	}
	cmd := p.command(i, p.args[i]...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("start trainer %d: %v", i, err)
	}
	pp := &pyProc{cmd: cmd, done: make(chan struct{})}
	go func() { pp.err = cmd.Wait(); f.Close(); close(pp.done) }()
	p.procs[i], p.logs[i] = pp, log
	p.all = append(p.all, log)
}

// pyProc is one trainer process.
type pyProc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when it exited
	err  error         // why, valid once done is closed
}

// Restart starts node i's trainer again with the script and arguments of
// its last Start.
func (p *pyTrainers) Restart(i int) {
	p.t.Helper()
	if p.args[i] == nil {
		p.t.Fatalf("trainer %d restarted before it was ever started", i)
	}
	p.Start(i, p.args[i][0], p.args[i][1:]...)
}

// Kill sends SIGKILL to node i's trainer and waits for it to exit.
func (p *pyTrainers) Kill(i int) {
	if pp := p.procs[i]; pp != nil {
		pp.cmd.Process.Signal(syscall.SIGKILL)
		<-pp.done
		delete(p.procs, i)
	}
}

// KillAll sends SIGKILL to every node of c and its trainer: what follows
// (a check of an exported file) needs the CPU they take.
func (p *pyTrainers) KillAll(c *Cluster) {
	for i := range c.Mesh.Procs {
		p.Kill(i)
		c.Kill(i)
	}
}

// Alive reports whether node i's trainer runs.
func (p *pyTrainers) Alive(i int) bool {
	pp := p.procs[i]
	if pp == nil {
		return false
	}
	select {
	case <-pp.done:
		return false
	default:
		return true
	}
}

// Exited reports whether node i's trainer, started and not killed by
// Kill, has exited on its own, and its exit error (nil: status 0).
func (p *pyTrainers) Exited(i int) (bool, error) {
	if p.procs[i] == nil || p.Alive(i) {
		return false, nil
	}
	return true, p.procs[i].err
}

// trainerTender keeps one trainer beside every training node of a
// FaultCluster under DSSP_FAULT_TRAINER=pytorch: a trainer that exited on
// its own while its node runs is started again (WaitFor calls tend on
// every round). A trainer exits 0 when its node told it stop (a graceful
// leave: the rolling restart); any other exit is a crash, recorded for
// the end of the test. held trainers are down on purpose (a fault); a
// node killed or leaving gets its trainer back when it runs again.
type trainerTender struct {
	py      *pyTrainers
	held    map[int]bool
	last    map[int]time.Time // the last restart per node
	crashes []Crash
}

func (tt *trainerTender) tend(c *FaultCluster) {
	for i, p := range c.Mesh.Procs {
		// A node killed or leaving on purpose (c.killed: a SIGTERM in
		// progress told its trainer stop) gets its trainer once it is
		// started again.
		if tt.held[i] || tt.py.args[i] == nil || !p.Alive() || c.killed[i] {
			continue
		}
		exited, err := tt.py.Exited(i)
		if !exited || time.Since(tt.last[i]) < 2*time.Second {
			continue
		}
		if err != nil {
			tail := launch.LogTail(tt.py.logs[i], 5)
			tt.crashes = append(tt.crashes, Crash{Node: i, ID: "trainer of " + c.IDs[i], At: time.Now(), Err: fmt.Sprintf("%v: %s", err, tail)})
			c.t.Logf("CRASH trainer%d: %v: %s", i, err, tail)
		} else {
			c.t.Logf("trainer%d exited (its node told it stop); started again", i)
		}
		tt.last[i] = time.Now()
		tt.py.Restart(i)
	}
}

// keep copies every trainer's logs (one per start) into dir.
func (tt *trainerTender) keep(dir string) {
	for _, l := range tt.py.all {
		if b, err := os.ReadFile(l); err == nil {
			os.WriteFile(filepath.Join(dir, filepath.Base(l)), b, 0o644)
		}
	}
}
