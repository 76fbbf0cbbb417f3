package trainer

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"dsspmesh/cudaops"
	"dsspmesh/node/job"
)

func TestFrameRoundTripAndBounds(t *testing.T) {
	var buf bytes.Buffer
	scratch, err := WriteFrame(&buf, nil, []byte(`{"op":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := buf.Bytes()[:4]; !bytes.Equal(got, []byte{10, 0, 0, 0}) {
		t.Fatalf("length prefix %v, want 10 little endian", got)
	}
	if _, err := WriteFrame(&buf, scratch, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	b, err := ReadFrame(&buf, nil, 64)
	if err != nil || string(b) != `{"op":"x"}` {
		t.Fatalf("ReadFrame = %q, %v", b, err)
	}
	if b, err = ReadFrame(&buf, b, 64); err != nil || string(b) != `{}` {
		t.Fatalf("second ReadFrame = %q, %v", b, err)
	}
	if _, err := ReadFrame(&buf, nil, 64); err != io.EOF {
		t.Fatalf("at the end: %v, want io.EOF", err)
	}
	// A length over the limit is refused before reading (or allocating) it.
	big := bytes.NewReader([]byte{0xff, 0xff, 0xff, 0x7f})
	if _, err := ReadFrame(big, nil, 1<<20); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("2 GiB frame: %v, want ErrFrameTooLarge", err)
	}
	cut := bytes.NewReader([]byte{5, 0, 0, 0, '{'})
	if _, err := ReadFrame(cut, nil, 64); err != io.ErrUnexpectedEOF {
		t.Fatalf("cut frame: %v, want io.ErrUnexpectedEOF", err)
	}
}

func TestShmRegionsAreLittleEndianAtTheirOffsets(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.shm")
	s, err := CreateShm(path, 5)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || fi.Size() != 60 || s.Bytes() != 60 {
		t.Fatalf("file mode %v size %d (Bytes %d), want 0600 and 3·4·5", fi.Mode().Perm(), fi.Size(), s.Bytes())
	}
	for r := range 3 {
		for i := range 5 {
			s.Region(r)[i] = float32(10*r + i)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for r := range 3 {
		for i := range 5 {
			if v := le32(b, 5, r, i); v != float32(10*r+i) {
				t.Fatalf("region %d [%d] = %v in the file", r, i, v)
			}
		}
	}
	// The file is made exclusively (NewShm names it afresh each run).
	var se *ShmError
	if _, err := CreateShm(path, 2); !errors.As(err, &se) {
		t.Fatalf("a second file at %s: %v, want a *ShmError", path, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the file outlives Close: %v", err)
	}
	if _, err := CreateShm(path, 0); err == nil {
		t.Fatal("0 parameters accepted")
	}
}

// serverUnder starts a server on a socket in a temporary folder whose job
// has the layout of mlpLayout (the first trainer fixes it when fix is set).
type testServer struct {
	*Server
	attached chan *External
	layout   cudaops.Layout
	init     []float32
}

func startServer(t *testing.T, sendInit bool) *testServer {
	return startServerOf(t, sendInit, Config{})
}

func startServerWith(t *testing.T, cfg Config) *testServer { return startServerOf(t, false, cfg) }

func startServerOf(t *testing.T, sendInit bool, cfg Config) *testServer {
	t.Helper()
	dir := t.TempDir()
	ts := &testServer{attached: make(chan *External, 4)}
	if !sendInit {
		l, err := ParseWireLayout(mlpLayout())
		if err != nil {
			t.Fatal(err)
		}
		ts.layout = l
	}
	cfg.Socket, cfg.ShmDir, cfg.GoneGrace = filepath.Join(dir, "trainer.sock"), dir, -1
	srv, err := Listen(cfg, Deps{Node: "node-a",
		Admit: func(l cudaops.Layout) (Admission, *Refusal) {
			if ts.layout == nil {
				ts.layout = l
				return Admission{Layout: l, SendInit: true, Batch: 8, Seed: 1, Dataset: "mnist"}, nil
			}
			if err := job.CompareLayout(ts.layout, l); err != nil {
				return Admission{}, &Refusal{Code: CodeLayoutMismatch, Message: err.Error(), Tensor: err.(*job.LayoutMismatchError).Name}
			}
			return Admission{Layout: ts.layout, Batch: 8, Seed: 1, Dataset: "mnist"}, nil
		},
		Init:     func(theta []float32) error { ts.init = append([]float32{}, theta...); return nil },
		Attached: func(e *External) { ts.attached <- e },
	})
	if err != nil {
		t.Fatal(err)
	}
	ts.Server = srv
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done; srv.Close("test over") })
	return ts
}

func TestExternalComputesThroughAFakeTrainer(t *testing.T) {
	ts := startServer(t, false)
	fi, err := os.Stat(ts.Path())
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %v %v, want a socket of mode 0600", fi, err)
	}
	f, w := dial(t, ts.Path(), mlpLayout())
	if w["op"] != "welcome" || w["params"] != float64(26) || w["shm_bytes"] != float64(312) || w["node"] != "node-a" ||
		w["local_steps"] != float64(1) || w["batch"] != float64(8) || w["send_init"] != false {
		t.Fatalf("welcome %v", w)
	}
	target := make([]float32, 26)
	for i := range target {
		target[i] = float32(i) / 10
	}
	stopped := make(chan string, 1)
	go func() { stopped <- f.serve(target) }()
	e := <-ts.attached
	if e.NumParams() != 26 {
		t.Fatalf("NumParams %d", e.NumParams())
	}
	theta := make([]float32, 26)
	for it := range 3 {
		if err := e.Next(8, 1, int64(8*it)); err != nil {
			t.Fatal(err)
		}
		var got []float32
		loss, err := e.Gradient(context.Background(), theta, 0, 8, func(off int, v []float32) {
			if off != 0 {
				t.Errorf("piece at %d", off)
			}
			got = append(got, v...)
		})
		if err != nil {
			t.Fatal(err)
		}
		var want float64
		for i := range theta {
			if d := theta[i] - target[i]; got[i] != d {
				t.Fatalf("iteration %d: gradient[%d] = %v, want %v", it, i, got[i], d)
			} else {
				want += 0.5 * float64(d) * float64(d)
			}
		}
		if math.Abs(loss-want) > 1e-6 {
			t.Fatalf("loss %v, want %v", loss, want)
		}
		for i := range theta { // a step of SGD with lr 0.5
			theta[i] -= 0.5 * got[i]
		}
		ev, err := e.Evaluate(context.Background(), theta)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Samples != 100 || ev.Accuracy <= 0 || ev.Accuracy > 1 {
			t.Fatalf("evaluation %+v", ev)
		}
	}
	// θ held in the region itself (the worker's ThetaHolder) is not copied.
	copy(e.Theta(), theta)
	e.Next(8, 1, -1)
	if _, err := e.Gradient(context.Background(), e.Theta(), 0, 8, func(int, []float32) {}); err != nil {
		t.Fatal(err)
	}
	st := e.Stats()
	if st.Iterations != 4 || st.ThetaBytes != 3*4*26 {
		t.Fatalf("a gradient on the region itself: stats %+v, want 4 iterations and the 3 earlier copies only", st)
	}
	if st.Iterations != 4 || st.Evaluations != 3 || st.ThetaBytes != 3*4*26 || st.PID != os.Getpid() {
		t.Fatalf("stats %+v, want 4 iterations, 3 evaluations, 312 bytes of θ, pid %d", st, os.Getpid())
	}
	// A second trainer while one is attached: busy.
	_, rep := dial(t, ts.Path(), mlpLayout())
	if rep["op"] != "error" || rep["code"] != CodeBusy {
		t.Fatalf("second trainer got %v, want error busy", rep)
	}
	e.Close("target reached")
	if r := <-stopped; r != "target reached" {
		t.Fatalf("trainer saw stop %q", r)
	}
	<-e.Done()
	if _, err := e.Gradient(context.Background(), theta, 0, 8, func(int, []float32) {}); !errors.Is(err, ErrTrainerGone) {
		t.Fatalf("after Close: %v, want ErrTrainerGone", err)
	}
	// The next trainer is admitted again.
	f2, w2 := dial(t, ts.Path(), mlpLayout())
	if w2["op"] != "welcome" {
		t.Fatalf("re-attaching trainer got %v", w2)
	}
	e2 := <-ts.attached
	f2.close()
	<-e2.Done()
	if err := e2.Err(); !errors.Is(err, ErrTrainerGone) || !strings.Contains(err.Error(), "EOF") {
		t.Fatalf("trainer closed: Err %v, want ErrTrainerGone naming EOF", err)
	}
}

func TestFirstTrainerFixesTheLayoutAndSendsInit(t *testing.T) {
	ts := startServer(t, true)
	f, w := dial(t, ts.Path(), mlpLayout())
	if w["send_init"] != true {
		t.Fatalf("welcome %v, want send_init", w)
	}
	for i := range f.regs[RegionTheta] {
		f.regs[RegionTheta][i] = float32(i) + 0.5
	}
	f.send(map[string]any{"op": "init"})
	e := <-ts.attached
	if len(ts.init) != 26 || ts.init[25] != 25.5 {
		t.Fatalf("θ₀ %v", ts.init)
	}
	f.close()
	<-e.Done()
	// A later trainer with another layout is refused, the tensor named.
	other := mlpLayout()
	other[2].Shape = []int{3, 4}
	_, rep := dial(t, ts.Path(), other)
	want := "layout mismatch at tensor 2 fc2.weight: shape [2 4] in the job, [3 4] in the trainer"
	if rep["op"] != "error" || rep["code"] != CodeLayoutMismatch || rep["message"] != want || rep["tensor"] != "fc2.weight" {
		t.Fatalf("mismatched trainer got %v, want layout-mismatch %q", rep, want)
	}
}

// TestPeerInputNeverPanics: every bad message from a trainer ends its
// attachment with an error naming what was wrong.
func TestPeerInputNeverPanics(t *testing.T) {
	cases := []struct {
		name  string
		reply func(f *fakeTrainer, compute map[string]any)
		want  string
	}{
		{"oversized frame", func(f *fakeTrainer, _ map[string]any) {
			f.c.Write([]byte{1, 0, 0x10, 0}) // 1 MiB + 1: over the limit
		}, "frame too large"},
		{"bad JSON", func(f *fakeTrainer, _ map[string]any) { f.sendRaw([]byte(`{"op":"update",`)) }, "bad JSON"},
		{"NaN loss", func(f *fakeTrainer, m map[string]any) {
			f.sendRaw([]byte(`{"op":"update","iter":1,"loss":NaN,"samples":8}`)) // what Python's json writes
		}, "bad JSON"},
		{"no loss", func(f *fakeTrainer, m map[string]any) {
			f.send(map[string]any{"op": "update", "iter": m["iter"], "samples": 8})
		}, "update 1: no loss"},
		{"wrong iter", func(f *fakeTrainer, m map[string]any) {
			f.send(map[string]any{"op": "update", "iter": 7, "loss": 1, "samples": 8})
		}, "update for iteration 7, want 1"},
		{"samples out of range", func(f *fakeTrainer, m map[string]any) {
			f.send(map[string]any{"op": "update", "iter": m["iter"], "loss": 1, "samples": 9})
		}, "samples 9 outside [1, 8]"},
		{"wrong op", func(f *fakeTrainer, m map[string]any) {
			f.send(map[string]any{"op": "evaluated", "seq": 1})
		}, `op "evaluated" while an update for iteration 1 was due`},
		{"no op", func(f *fakeTrainer, m map[string]any) { f.sendRaw([]byte(`{"iter":1}`)) }, "without an op"},
		{"EOF", func(f *fakeTrainer, m map[string]any) { f.c.Close() }, "EOF"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ts := startServer(t, false)
			f, _ := dial(t, ts.Path(), mlpLayout())
			e := <-ts.attached
			go func() {
				if m := f.recv(); m != nil {
					c.reply(f, m)
				}
			}()
			e.Next(8, 1, -1)
			_, err := e.Gradient(context.Background(), make([]float32, 26), 0, 8, func(int, []float32) { t.Error("emitted a bad update") })
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Gradient: %v, want an error containing %q", err, c.want)
			}
			<-e.Done()
		})
	}
}

// TestNullLossIsNaNAndAFailedEvaluationIsNoMeasurement: a trainer's
// non-finite loss (null) reaches the worker as NaN, and an evaluated
// with an error is an *EvaluationError; neither ends the attachment.
func TestNullLossIsNaNAndAFailedEvaluationIsNoMeasurement(t *testing.T) {
	ts := startServer(t, false)
	f, _ := dial(t, ts.Path(), mlpLayout())
	e := <-ts.attached
	go func() {
		m := f.recv()
		f.send(map[string]any{"op": "update", "iter": m["iter"], "loss": nil, "samples": 8})
		m = f.recv()
		f.send(map[string]any{"op": "evaluated", "seq": m["seq"], "accuracy": 0, "loss": 0, "samples": 0, "error": "no evaluation function"})
	}()
	e.Next(8, 1, -1)
	loss, err := e.Gradient(context.Background(), make([]float32, 26), 0, 8, func(int, []float32) {})
	if err != nil || !math.IsNaN(loss) {
		t.Fatalf("null loss: %v, %v; want NaN", loss, err)
	}
	_, err = e.Evaluate(context.Background(), make([]float32, 26))
	var ee *EvaluationError
	if !errors.As(err, &ee) || !strings.Contains(err.Error(), "no evaluation function") {
		t.Fatalf("evaluated with an error: %v", err)
	}
	if e.Err() != nil {
		t.Fatalf("the attachment ended: %v", e.Err())
	}
}

// TestAHungTrainerIsDetached: a trainer that never answers is taken for
// hung after its limit and detached, its worker's Gradient erring.
func TestAHungTrainerIsDetached(t *testing.T) {
	ts := startServerWith(t, Config{Answers: AnswerLimits{First: 50 * time.Millisecond}})
	dial(t, ts.Path(), mlpLayout()) // says hello, then nothing
	e := <-ts.attached
	e.Next(8, 1, -1)
	_, err := e.Gradient(context.Background(), make([]float32, 26), 0, 8, func(int, []float32) {})
	if !errors.Is(err, ErrTrainerGone) || !strings.Contains(err.Error(), "no update within 50ms") {
		t.Fatalf("Gradient on a silent trainer: %v", err)
	}
	<-e.Done()
}

func TestHelloRefusals(t *testing.T) {
	ts := startServer(t, false)
	for _, c := range []struct {
		hello map[string]any
		code  string
	}{
		{map[string]any{"op": "hello", "version": 1, "layout": mlpLayout()}, CodeVersion},
		{map[string]any{"op": "hello", "version": 3, "layout": mlpLayout()}, CodeVersion},
		{map[string]any{"op": "hello", "layout": mlpLayout()}, CodeVersion},
		{map[string]any{"op": "compute"}, CodeProtocol},
		{map[string]any{"op": "hello", "version": 2, "layout": []Tensor{{Name: "w", Shape: []int{2}, Dtype: "complex64"}}}, CodeLayoutMismatch},
		{map[string]any{"op": "hello", "version": 2, "layout": []Tensor{{Name: "w", Shape: []int{2}, Dtype: "float32", Kind: "grad"}}}, CodeLayoutMismatch},
		{map[string]any{"op": "hello", "version": 2, "layout": []Tensor{{Name: "w", Shape: []int{2}, Dtype: "float32", Aliases: []string{"w"}}}}, CodeLayoutMismatch},
		{map[string]any{"op": "hello", "version": 2, "layout": []Tensor{{Name: "w", Shape: []int{-2}, Dtype: "float32"}}}, CodeLayoutMismatch},
		{map[string]any{"op": "hello", "version": 2, "layout": []Tensor{}}, CodeLayoutMismatch},
	} {
		c2, err := net.Dial("unix", ts.Path())
		if err != nil {
			t.Fatal(err)
		}
		f := &fakeTrainer{t: t, c: c2}
		f.send(c.hello)
		rep := f.recv()
		f.close()
		if rep["op"] != "error" || rep["code"] != c.code {
			t.Errorf("hello %v: got %v, want error %s", c.hello, rep, c.code)
		}
	}
}

func TestListenReplacesAStaleSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "trainer.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	d := Deps{Admit: func(cudaops.Layout) (Admission, *Refusal) { return Admission{}, nil }}
	if _, err := Listen(Config{Socket: sock}, d); err == nil || !strings.Contains(err.Error(), "another node") {
		t.Fatalf("Listen on a live socket: %v", err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close() // the file stays: a node that died
	s, err := Listen(Config{Socket: sock}, d)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	s.Close("test")
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("socket left after Close: %v", err)
	}
	os.WriteFile(sock, nil, 0o600)
	if _, err := Listen(Config{Socket: sock}, d); err == nil {
		t.Fatal("Listen replaced a regular file")
	}
}

// TestExternalTakesARoundWhole: a round of h local steps (--local-steps)
// goes to the trainer as local_steps h of batch n/h, and a split of it
// (the pipelined loop's) is refused before anything is sent.
func TestExternalTakesARoundWhole(t *testing.T) {
	ts := startServer(t, false)
	f, _ := dial(t, ts.Path(), mlpLayout())
	f.computes = make(chan map[string]any, 4)
	go f.serve(make([]float32, 26))
	e := <-ts.attached
	theta := make([]float32, 26)
	if err := e.Next(20, 3, 40); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Gradient(context.Background(), theta, 0, 20, func(int, []float32) {}); err != nil {
		t.Fatal(err)
	}
	m := <-f.computes
	if m["batch"] != float64(6) || m["local_steps"] != float64(3) || m["pos"] != float64(40) || m["lo"] != float64(0) || m["hi"] != float64(6) {
		t.Fatalf("compute for a round of 20 samples in 3 steps: %v", m)
	}
	e.Next(20, 3, 60)
	if _, err := e.Gradient(context.Background(), theta, 0, 10, func(int, []float32) {}); err == nil || !strings.Contains(err.Error(), "takes a round whole") {
		t.Fatalf("a split round: %v", err)
	}
	if err := e.Next(2, 3, 0); err == nil {
		t.Fatal("a round of fewer samples than steps was taken")
	}
}

// TestOverlappingEvaluationsTakeTurns: a trainer that evaluates off its
// training path acks "evaluating" and answers later; a second Evaluate
// asked meanwhile (the evaluation loop beside the worker's start loss)
// waits for the first, and each gets its own answer, the trainer seeing
// one evaluate at a time.
func TestOverlappingEvaluationsTakeTurns(t *testing.T) {
	ts := startServer(t, false)
	f, _ := dial(t, ts.Path(), mlpLayout())
	e := <-ts.attached
	type result struct {
		ev  Evaluation
		err error
	}
	first, second := make(chan result, 1), make(chan result, 1)
	asked := make(chan float64, 2)
	answer := make(chan struct{})
	go func() {
		for range 2 {
			m := f.recv()
			if m == nil || m["op"] != "evaluate" {
				t.Errorf("the trainer got %v, want evaluate", m)
				return
			}
			asked <- m["seq"].(float64)
			f.send(map[string]any{"op": "evaluating", "seq": m["seq"]})
			<-answer
			f.send(map[string]any{"op": "evaluated", "seq": m["seq"], "accuracy": m["seq"].(float64) / 10, "loss": 1, "samples": 4})
		}
	}()
	go func() {
		ev, err := e.Evaluate(context.Background(), make([]float32, 26))
		first <- result{ev, err}
	}()
	s1 := <-asked // the first is acked and under way: the exchange is free
	go func() {
		ev, err := e.Evaluate(context.Background(), make([]float32, 26))
		second <- result{ev, err}
	}()
	answer <- struct{}{}
	r1 := <-first
	s2 := <-asked
	answer <- struct{}{}
	r2 := <-second
	if r1.err != nil || r2.err != nil || r1.ev.Accuracy != s1/10 || r2.ev.Accuracy != s2/10 || s2 != s1+1 {
		t.Fatalf("evaluations %+v %v (seq %v) and %+v %v (seq %v)", r1.ev, r1.err, s1, r2.ev, r2.err, s2)
	}
}
