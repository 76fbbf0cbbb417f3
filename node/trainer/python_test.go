package trainer_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"dsspmesh/cudaops"
	"dsspmesh/modelfile/modelfiletest"
	"dsspmesh/node/job"
	"dsspmesh/node/trainer"
)

// pyTrainer is python/tests/node_trainer.py (dsspmesh, the Python side of
// the protocol) attached to a Server: the cross-language check of the
// protocol, without a mesh.
type pyTrainer struct {
	cmd   *exec.Cmd
	lines *bufio.Scanner
	done  chan error
}

type pyLine struct {
	Iter     int64     `json:"iter"`
	ThetaSum float64   `json:"theta_sum"`
	Loss     float64   `json:"loss"`
	Idx      []int64   `json:"idx"`
	Grad     []float64 `json:"grad"`
	Refused  *string   `json:"refused"`
	Message  string    `json:"message"`
	Stopped  *string   `json:"stopped"`
	BridgeUS float64   `json:"bridge_us"`
	Bytes    int64     `json:"bytes_per_round"`
	Rounds   int64     `json:"rounds"`
	Evals    int64     `json:"evaluations"`
}

func startPy(t *testing.T, py, sock, kind string) *pyTrainer {
	t.Helper()
	cmd := exec.Command(py, filepath.Join("..", "..", "python", "tests", "node_trainer.py"), kind)
	cmd.Env = append(os.Environ(), "DSSP_TRAINER_SOCKET="+sock, "PYTHONDONTWRITEBYTECODE=1", "OMP_NUM_THREADS=1")
	cmd.Stderr = &testLogWriter{t: t}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &pyTrainer{cmd: cmd, lines: bufio.NewScanner(out), done: make(chan error, 1)}
	p.lines.Buffer(make([]byte, 1<<20), 1<<24)
	t.Cleanup(func() { cmd.Process.Kill(); <-p.done })
	go func() { p.done <- cmd.Wait() }()
	return p
}

// next is the trainer's next stdout line.
func (p *pyTrainer) next(t *testing.T) pyLine {
	t.Helper()
	if !p.lines.Scan() {
		t.Fatalf("the Python trainer printed no more lines: %v", p.lines.Err())
	}
	var l pyLine
	if err := json.Unmarshal(p.lines.Bytes(), &l); err != nil {
		t.Fatalf("Python trainer line %q: %v", p.lines.Text(), err)
	}
	return l
}

type testLogWriter struct{ t *testing.T }

func (w *testLogWriter) Write(b []byte) (int, error) { w.t.Logf("python: %s", b); return len(b), nil }

// pyServer listens in a temporary folder; a job whose layout the first
// trainer fixes (its parameters become θ₀) unless layout is given.
func pyServer(t *testing.T, layout cudaops.Layout, batch int) (*trainer.Server, chan *trainer.External, chan []float32) {
	return pyServerFor(t, layout, batch, trainer.Admission{Update: trainer.UpdateGradient})
}

// pyServerFor is pyServer admitting trainers with adm's update and
// optimizer.
func pyServerFor(t *testing.T, layout cudaops.Layout, batch int, adm trainer.Admission) (*trainer.Server, chan *trainer.External, chan []float32) {
	t.Helper()
	dir := t.TempDir()
	attached, inits := make(chan *trainer.External, 4), make(chan []float32, 1)
	srv, err := trainer.Listen(trainer.Config{Socket: filepath.Join(dir, "trainer.sock"), ShmDir: dir}, trainer.Deps{
		Node: "node-py",
		Admit: func(l cudaops.Layout) (trainer.Admission, *trainer.Refusal) {
			if layout == nil {
				layout = l
				return trainer.Admission{Layout: l, SendInit: true, Batch: batch, Seed: 1, Dataset: "mnist", Update: adm.Update, Optimizer: adm.Optimizer}, nil
			}
			if err := job.CompareLayout(layout, l); err != nil {
				var m *job.LayoutMismatchError
				errors.As(err, &m)
				return trainer.Admission{}, &trainer.Refusal{Code: trainer.CodeLayoutMismatch, Message: err.Error(), Tensor: m.Name}
			}
			return trainer.Admission{Layout: layout, Batch: batch, Seed: 1, Dataset: "mnist", Update: adm.Update, Optimizer: adm.Optimizer}, nil
		},
		Init:     func(theta []float32) error { inits <- append([]float32{}, theta...); return nil },
		Attached: func(e *trainer.External) { attached <- e },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done; srv.Close("test over") })
	return srv, attached, inits
}

func waitAttached(t *testing.T, ch chan *trainer.External) *trainer.External {
	t.Helper()
	select {
	case e := <-ch:
		return e
	case <-time.After(60 * time.Second):
		t.Fatal("no trainer attached within 60 s")
		return nil
	}
}

// TestPythonTrainer runs dsspmesh against this package's server: a
// mismatched layout is refused naming the tensor; the node's θ is what
// the PyTorch model computes at, the data positions are the job-wide
// order's, the update the node receives is the gradient the trainer
// computed, bit for bit; evaluate is answered on the eval region; a stop
// ends the trainer's loop.
func TestPythonTrainer(t *testing.T) {
	py := modelfiletest.PythonWith(t, "numpy", "torch")
	tiny, err := trainer.ParseWireLayout([]trainer.Tensor{
		{Name: "fc1.weight", Shape: []int{4, 3}, Dtype: "float32"}, {Name: "fc1.bias", Shape: []int{4}, Dtype: "float32"},
		{Name: "fc2.weight", Shape: []int{2, 4}, Dtype: "float32"}, {Name: "fc2.bias", Shape: []int{2}, Dtype: "float32"}})
	if err != nil {
		t.Fatal(err)
	}
	srv, attached, _ := pyServer(t, tiny, 8)

	wrong := startPy(t, py, srv.Path(), "wrong")
	if l := wrong.next(t); l.Refused == nil || *l.Refused != "fc1.weight" {
		t.Fatalf("a trainer with a 5-wide fc1 got %+v, want refused naming fc1.weight", l)
	}

	p := startPy(t, py, srv.Path(), "tiny")
	e := waitAttached(t, attached)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	got := make([]float32, e.NumParams())
	for it := int64(1); it <= 6; it++ {
		theta := make([]float32, e.NumParams())
		var sum float64
		for i := range theta {
			theta[i] = float32(rng.NormFloat64())
			sum += float64(theta[i])
		}
		pos := (it - 1) * 8
		lo, hi := 0, 8
		if it == 3 {
			lo, hi = 2, 6 // a pipelined part of the batch
		}
		if err := e.Next(8, 1, pos); err != nil {
			t.Fatal(err)
		}
		loss, err := e.Gradient(ctx, theta, lo, hi, func(off int, v []float32) { copy(got[off:], v) })
		if err != nil {
			t.Fatalf("iteration %d: %v", it, err)
		}
		l := p.next(t)
		if l.Iter != it || math.Abs(l.ThetaSum-sum) > 1e-4 {
			t.Fatalf("iteration %d: the trainer computed iteration %d at Σθ %.6f, the node sent Σθ %.6f", it, l.Iter, l.ThetaSum, sum)
		}
		if float32(loss) != float32(l.Loss) || len(l.Idx) != hi-lo {
			t.Fatalf("iteration %d: loss %v (trainer %v), %d samples for [%d, %d)", it, loss, l.Loss, len(l.Idx), lo, hi)
		}
		for i, g := range l.Grad {
			if float32(g) != got[i] {
				t.Fatalf("iteration %d: update[%d] = %v, the trainer's gradient is %v", it, i, got[i], g)
			}
		}
	}
	snap := make([]float32, e.NumParams())
	var sum float64
	for i := range snap {
		snap[i] = float32(i) / 16
		sum += float64(snap[i])
	}
	ev, err := e.Evaluate(ctx, snap)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Accuracy != 0.25 || math.Abs(ev.Loss-sum) > 1e-6 || ev.Samples != 32 {
		t.Fatalf("evaluation %+v, want accuracy 0.25, loss Σ snapshot %v, 32 samples", ev, sum)
	}
	srv.Close("target reached")
	if l := p.next(t); l.Stopped == nil || *l.Stopped != "target reached" || l.Rounds != 6 || l.Evals != 1 {
		t.Fatalf("after stop the trainer printed %+v", l)
	}
	if err := <-p.done; err != nil {
		t.Fatalf("the trainer exited with %v after stop", err)
	}
	p.done <- nil // for the cleanup
}

// TestPythonTrainerDelta runs dsspmesh on a job of the combine rule mean:
// the trainer steps the job's optimizer (momentum SGD, as welcome names
// it, none given by the loop) and the update the node receives is that
// step's change, θ − θ_after with the velocity carried from round to
// round, which the test recomputes from the gradients the trainer printed.
func TestPythonTrainerDelta(t *testing.T) {
	py := modelfiletest.PythonWith(t, "numpy", "torch")
	tiny, err := trainer.ParseWireLayout([]trainer.Tensor{
		{Name: "fc1.weight", Shape: []int{4, 3}, Dtype: "float32"}, {Name: "fc1.bias", Shape: []int{4}, Dtype: "float32"},
		{Name: "fc2.weight", Shape: []int{2, 4}, Dtype: "float32"}, {Name: "fc2.bias", Shape: []int{2}, Dtype: "float32"}})
	if err != nil {
		t.Fatal(err)
	}
	const lr, mu = 0.5, 0.9
	srv, attached, _ := pyServerFor(t, tiny, 8, trainer.Admission{Update: trainer.UpdateDelta,
		Optimizer: trainer.WireOptimizer{Kind: "momentum", LR: lr, Momentum: mu}})
	p := startPy(t, py, srv.Path(), "tiny")
	e := waitAttached(t, attached)
	got := make([]float32, e.NumParams())
	vel := make([]float64, e.NumParams())
	rng := rand.New(rand.NewPCG(3, 4))
	for it := int64(1); it <= 4; it++ {
		theta := make([]float32, e.NumParams())
		for i := range theta {
			theta[i] = float32(rng.NormFloat64())
		}
		if err := e.Next(8, 1, (it-1)*8); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Gradient(context.Background(), theta, 0, 8, func(off int, v []float32) { copy(got[off:], v) }); err != nil {
			t.Fatalf("iteration %d: %v", it, err)
		}
		l := p.next(t)
		for i, g := range l.Grad {
			vel[i] = mu*vel[i] + g
			want := lr * vel[i]
			if d := math.Abs(float64(got[i]) - want); d > 1e-6*(1+math.Abs(float64(theta[i]))) {
				t.Fatalf("iteration %d: update[%d] = %v, the step's change is %v", it, i, got[i], want)
			}
		}
	}
	srv.Close("done")
	if l := p.next(t); l.Stopped == nil || l.Rounds != 4 {
		t.Fatalf("after stop the trainer printed %+v", l)
	}
}

// TestPythonTrainerBridgeCost measures the bridge on the MNIST MLP
// (235 146 parameters, batch 64): the node's round trip minus the
// trainer's own time, per iteration, and the trainer's own copies.
func TestPythonTrainerBridgeCost(t *testing.T) {
	if testing.Short() {
		t.Skip("timing run; skipped with -short")
	}
	py := modelfiletest.PythonWith(t, "numpy", "torch")
	srv, attached, inits := pyServer(t, nil, 64)
	p := startPy(t, py, srv.Path(), "mlp")
	e := waitAttached(t, attached)
	theta := <-inits
	if len(theta) != 235146 {
		t.Fatalf("θ₀ of %d parameters, want the MLP's 235146", len(theta))
	}
	ctx := context.Background()
	const iters = 200
	var wall time.Duration
	for it := 0; it < iters; it++ {
		e.Next(64, 1, int64(it*64))
		start := time.Now()
		if _, err := e.Gradient(ctx, theta, 0, 64, func(int, []float32) {}); err != nil {
			t.Fatal(err)
		}
		wall += time.Since(start)
		p.next(t)
	}
	srv.Close("done")
	var l pyLine
	for l.Stopped == nil {
		l = p.next(t)
	}
	s := e.Stats()
	bridge := time.Duration(s.RoundTripNanos-s.TrainerNanos) / iters
	t.Logf("MNIST MLP, %d iterations: iteration %v; bridge %v in the node's view (round trip − trainer's compute; θ copy %v), %.0f µs in the trainer's (%d bytes copied/round): %.1f %% of the iteration",
		iters, (wall / iters).Round(time.Microsecond), bridge.Round(time.Microsecond),
		(time.Duration(s.ThetaNanos) / iters).Round(time.Microsecond), l.BridgeUS, l.Bytes,
		100*float64(bridge+time.Duration(s.ThetaNanos)/iters)/float64(wall/iters))
}
