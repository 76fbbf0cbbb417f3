package node_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"dsspmesh/cudaops"
	"dsspmesh/mesh"
	"dsspmesh/modelfile"
	"dsspmesh/node"
	"dsspmesh/node/job"
	"dsspmesh/node/status"
	"dsspmesh/node/trainer"
)

// goTrainer is an external trainer written in Go: it speaks the trainer
// protocol on a node's socket and maps its shared memory, as the Python
// package does. Its "model" pulls θ towards 0: the gradient is θ itself.
type goTrainer struct {
	t       *testing.T
	c       net.Conn
	welcome map[string]any
	regs    [3][]float32
	data    []byte
	done    chan struct{}
}

func tensorsOf(l cudaops.Layout) []trainer.Tensor { return trainer.WireLayout(l) }

// attach dials sock (retrying while the node has not created it yet) and
// says hello with layout. With a welcome asking for init, θ₀ = init.
func attach(t *testing.T, sock string, layout []trainer.Tensor, init float32) (*goTrainer, map[string]any) {
	t.Helper()
	var c net.Conn
	deadline := time.Now().Add(time.Minute)
	for {
		var err error
		if c, err = net.Dial("unix", sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no trainer socket at %s: %v", sock, err)
		}
		<-time.After(20 * time.Millisecond) // polls for the node's socket, as a trainer started before its node does
	}
	g := &goTrainer{t: t, c: c, done: make(chan struct{})}
	g.send(map[string]any{"op": "hello", "version": trainer.Version, "role": "train", "layout": layout})
	rep := g.recv()
	if rep["op"] != "welcome" {
		c.Close()
		return nil, rep
	}
	t.Cleanup(g.close)
	g.welcome = rep
	p := int(rep["params"].(float64))
	f, err := os.OpenFile(rep["shm"].(string), os.O_RDWR, 0)
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	g.data, err = syscall.Mmap(int(f.Fd()), 0, 12*p, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	all := unsafe.Slice((*float32)(unsafe.Pointer(&g.data[0])), 3*p)
	for i := range g.regs {
		g.regs[i] = all[i*p : (i+1)*p]
	}
	if rep["send_init"] == true {
		for i := range g.regs[trainer.RegionTheta] {
			g.regs[trainer.RegionTheta][i] = init
		}
		g.send(map[string]any{"op": "init"})
	}
	go g.serve()
	return g, rep
}

func (g *goTrainer) send(m any) {
	b, _ := json.Marshal(m)
	trainer.WriteFrame(g.c, nil, b)
}

func (g *goTrainer) recv() map[string]any {
	b, err := trainer.ReadFrame(g.c, nil, trainer.DefaultMaxFrame)
	if err != nil {
		return nil
	}
	var m map[string]any
	json.Unmarshal(b, &m)
	return m
}

func (g *goTrainer) serve() {
	defer close(g.done)
	for {
		m := g.recv()
		if m == nil {
			return
		}
		switch m["op"] {
		case "compute":
			var loss float64
			for i, v := range g.regs[trainer.RegionTheta] {
				g.regs[trainer.RegionUpdate][i] = v
				loss += float64(v) * float64(v)
			}
			g.send(map[string]any{"op": "update", "iter": m["iter"], "loss": loss, "samples": m["hi"].(float64) - m["lo"].(float64), "compute_s": 0.0001})
		case "evaluate":
			g.send(map[string]any{"op": "evaluated", "seq": m["seq"], "accuracy": 0.625, "loss": 0.5, "samples": 80})
		case "stop":
			g.c.Close()
			return
		}
	}
}

// close detaches the trainer: its socket closed, as a trainer killed.
func (g *goTrainer) close() {
	g.c.Close()
	<-g.done
	if g.data != nil {
		syscall.Munmap(g.data)
		g.data = nil
	}
}

func getStatus(t *testing.T, addr string) status.Status {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s status.Status
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestInProcessExternalTrainers runs two nodes with --trainer external on
// a --model external job. The bootstrap node waits for its first trainer,
// whose layout (the MLP's) and initial parameters become the job's; the
// joiner adopts the layout from the spec; both trainers' updates are
// applied by the shards. A trainer that detaches is a worker removed from
// every shard; one presenting another layout is refused naming the
// tensor; a trainer re-attaching is re-added and trains on. The exported
// model carries the trainers' tensor names, and the evaluator's trainer
// evaluates.
func TestInProcessExternalTrainers(t *testing.T) {
	const shards = 2
	mlp, err := cudaops.NewModel("mlp", cudaops.ModelOptions{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	layout := tensorsOf(mlp.Layout())
	rec := newRecorder()
	dirs := map[int]string{}
	m := startMesh(t, 2, shards, rec, func(i int, c *node.Config) {
		c.Trainer, c.Spec.Model, c.Spec.Dataset = node.TrainerExternal, "external", "mnist"
		c.Spec.Replication = 1
		c.EvalEvery = 100 * time.Millisecond
		dirs[i] = c.DataDir
	})
	var ids [2]mesh.NodeID
	var https [2]string
	m.mu.Lock()
	for id, nd := range m.nodes {
		for i, d := range dirs {
			if nd.dir == d {
				ids[i], https[i] = id, nd.http
			}
		}
	}
	m.mu.Unlock()

	a, w := attach(t, filepath.Join(dirs[0], node.TrainerSocket), layout, 0.01)
	if w["send_init"] != true || w["params"] != float64(mlp.NumParams()) || w["local_steps"] != float64(1) {
		t.Fatalf("bootstrap's first trainer: welcome %v, want send_init and the MLP's %d parameters", w, mlp.NumParams())
	}
	// No --dataset was given (the config's mnist is the built-in default,
	// not set explicitly): the job names no dataset it does not know.
	if w["dataset"] != job.ExternalDataset {
		t.Fatalf("welcome's dataset %v: want %q for an external job started without --dataset", w["dataset"], job.ExternalDataset)
	}
	b, w := attach(t, filepath.Join(dirs[1], node.TrainerSocket), layout, 0)
	if w["send_init"] != false {
		t.Fatalf("joiner's trainer: welcome %v, want no init", w)
	}
	rec.wait(t, "both trainers' updates applied", func() bool { return rec.allAcked(ids[:], 5) })
	_ = a

	// The trainer of node 1 detaches: its worker leaves every shard.
	b.close()
	rec.wait(t, "the detached trainer's worker removed from every shard", func() bool { return rec.removedEverywhere(ids[1], shards) })

	// Another layout is refused with the tensor's name.
	other := tensorsOf(mlp.Layout())
	other[2].Shape = []int{64, 256}
	if g, rep := attach(t, filepath.Join(dirs[1], node.TrainerSocket), other, 0); g != nil || rep["code"] != trainer.CodeLayoutMismatch || rep["tensor"] != "fc2.weight" {
		t.Fatalf("mismatched trainer: %v, want layout-mismatch naming fc2.weight", rep)
	}

	// A trainer re-attaching is re-added and trains on.
	from := rec.ackedOn(ids[1])
	attach(t, filepath.Join(dirs[1], node.TrainerSocket), layout, 0)
	rec.wait(t, "the re-attached trainer trains", func() bool { return rec.ackedOn(ids[1]) >= from+5 })

	st := getStatus(t, https[1])
	if st.Trainer == nil || !st.Trainer.Attached || st.Trainer.Socket != filepath.Join(dirs[1], node.TrainerSocket) ||
		st.Trainer.Attachments != 2 || st.Trainer.PID != os.Getpid() || st.Trainer.BytesCopiedPerIter != 0 || st.Trainer.RoundTripMicros <= 0 ||
		st.Trainer.Tensors != len(layout) || st.Trainer.Params != mlp.NumParams() {
		t.Fatalf("node 1's trainer status %+v (want attached a second time, nothing copied: the worker keeps θ in the shared memory)", st.Trainer)
	}
	if st.Spec == nil || st.Spec.Layout == "" {
		t.Fatalf("the joiner's spec has no layout: %+v", st.Spec)
	}

	// The evaluator's trainer evaluates; every node shows its result.
	deadline := time.Now().Add(time.Minute)
	for {
		if st := getStatus(t, https[0]); st.Eval != nil && st.Eval.Accuracy == 0.625 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no evaluation by the evaluator's trainer within a minute")
		}
		<-time.After(50 * time.Millisecond)
	}

	// The exported model carries the trainers' names and moved from θ₀.
	resp, err := http.Get("http://" + https[0] + "/model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /model.safetensors: %d %v", resp.StatusCode, err)
	}
	f, err := modelfile.Decode(body)
	if err != nil {
		t.Fatal(err)
	}
	if f.Meta.Model != "external" || f.Meta.Dataset != job.ExternalDataset {
		t.Fatalf("exported metadata: model %q dataset %q, want external and %q", f.Meta.Model, f.Meta.Dataset, job.ExternalDataset)
	}
	theta, err := f.Params(mlp.Layout())
	if err != nil {
		t.Fatalf("the exported file does not hold the trainers' tensors: %v", err)
	}
	if theta[0] == 0.01 || theta[0] > 0.01 || theta[0] < -0.01 {
		t.Fatalf("θ[0] = %v: the updates (θ pulled towards 0 from 0.01) were not applied", theta[0])
	}
}

// TestInProcessTrainerRefusedByABuiltinJob: a node with --trainer
// external on a job of a built-in model trains nothing and refuses a
// trainer with not-external.
func TestInProcessTrainerRefusedByABuiltinJob(t *testing.T) {
	rec := newRecorder()
	var dir string
	m := startMesh(t, 1, 1, rec, func(i int, c *node.Config) {
		c.Trainer = node.TrainerExternal
		c.Spec.Replication = 1
		dir = c.DataDir
	})
	mlp, err := cudaops.NewModel("mlp", cudaops.ModelOptions{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	g, rep := attach(t, filepath.Join(dir, node.TrainerSocket), tensorsOf(mlp.Layout()), 0)
	if g != nil || rep["code"] != trainer.CodeNotExternal {
		t.Fatalf("trainer on a built-in job: %v, want error not-external", rep)
	}
	// The node is up before it stops.
	var addr string
	m.mu.Lock()
	for _, nd := range m.nodes {
		addr = nd.http
	}
	m.mu.Unlock()
	for deadline := time.Now().Add(time.Minute); getStatus(t, addr).Phase != "training"; {
		if time.Now().After(deadline) {
			t.Fatal("the node did not come up within a minute")
		}
		<-time.After(20 * time.Millisecond)
	}
	if st := getStatus(t, addr); st.Worker != nil || st.Trainer == nil || st.Trainer.Attached {
		t.Fatalf("a node of a built-in job with --trainer external: worker %+v, trainer %+v; want no worker, nothing attached", st.Worker, st.Trainer)
	}
}

// TestInProcessExternalJobFromInitFrom: --model external with --init-from
// a safetensors file that names no layout (as PyTorch's save_file writes
// it): the first trainer orders the file's tensors and the file gives θ₀
// (no init from the trainer); a trainer whose tensors differ from the
// file's is refused naming the tensor.
func TestInProcessExternalJobFromInitFrom(t *testing.T) {
	layout := cudaops.Layout{{Name: "enc.w", Shape: []int{3, 4}}, {Name: "enc.b", Offset: 12, Shape: []int{3}}, {Name: "temp", Offset: 15, Shape: []int{}}}
	theta := make([]float32, 16)
	for i := range theta {
		theta[i] = float32(i)
	}
	file := filepath.Join(t.TempDir(), "init.safetensors")
	if err := modelfile.WriteFile(file, layout, theta, modelfile.Meta{Model: "external"}); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	var dir string
	m := startMesh(t, 1, 1, rec, func(i int, c *node.Config) {
		c.Trainer, c.Spec.Model, c.Spec.InitFrom, c.Spec.Replication, c.Spec.Shards = node.TrainerExternal, "external", file, 1, 0
		dir = c.DataDir
	})
	var addr string
	m.mu.Lock()
	for _, nd := range m.nodes {
		addr = nd.http
	}
	m.mu.Unlock()
	sock := filepath.Join(dir, node.TrainerSocket)
	bad := trainer.WireLayout(layout)
	bad[1].Shape = []int{4}
	if g, rep := attach(t, sock, bad, 0); g != nil || rep["code"] != trainer.CodeLayoutMismatch || rep["tensor"] != "enc.b" {
		t.Fatalf("trainer whose enc.b differs from the file's: %v", rep)
	}
	g, w := attach(t, sock, trainer.WireLayout(layout), 0)
	if g == nil || w["send_init"] != false || w["params"] != float64(16) {
		t.Fatalf("trainer with the file's tensors: %v", w)
	}
	for deadline := time.Now().Add(time.Minute); getStatus(t, addr).Phase != "training"; {
		if time.Now().After(deadline) {
			t.Fatal("the node did not come up within a minute")
		}
		<-time.After(20 * time.Millisecond)
	}
	st := getStatus(t, addr)
	if st.Spec == nil || st.Spec.Layout != "enc.w:3x4,enc.b:3,temp:" || st.Spec.Shards != 1 {
		t.Fatalf("spec %+v, want the trainer's order of the file's tensors", st.Spec)
	}
}
