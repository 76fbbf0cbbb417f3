package bench

import (
	"math"
	"strings"
	"testing"
	"time"

	"dsspmesh/node/launch"
	"dsspmesh/node/records"
	"dsspmesh/node/status"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func pytorchResult() *PyTorchResult {
	cfg := DefaultPyTorchConfig()
	pt := SystemRun{Setting: "equal", System: MeshPyTorch, ToTarget: 30 * time.Second, FirstIter: 6 * time.Second, SamplesPerSec: 6000, FinalAcc: 0.971,
		Bridges: []Bridge{
			{Node: "a", Iteration: 20 * time.Millisecond, Compute: 10 * time.Millisecond, NodeSide: 600 * time.Microsecond, NodeBytes: 940000, TrainerSide: 400 * time.Microsecond, TrainerBytes: 1880000, Evaluating: 1500 * time.Millisecond, TrainerWait: 0.1},
			{Node: "b", Iteration: 30 * time.Millisecond, Compute: 10 * time.Millisecond, NodeSide: 1400 * time.Microsecond, NodeBytes: 940000, TrainerSide: -1, TrainerBytes: -1, TrainerWait: -1},
		}}
	return &PyTorchResult{Config: cfg, Runs: []SystemRun{
		pt,
		{Setting: "equal", System: MeshGo, ToTarget: 20 * time.Second, SamplesPerSec: 9000},
		{Setting: "equal", System: DDP, ToTarget: 60 * time.Second, SamplesPerSec: 4000},
		{Setting: "mixed", System: MeshPyTorch, ToTarget: 50 * time.Second, SamplesPerSec: 3000},
		{Setting: "mixed", System: DDP, ToTarget: NotReached, SamplesPerSec: 1000},
	}}
}

func findRatio(t *testing.T, rs []TargetRatio, prefix string) TargetRatio {
	t.Helper()
	for _, r := range rs {
		if strings.HasPrefix(r.Name, prefix) {
			return r
		}
	}
	t.Fatalf("no ratio %q in %v", prefix, rs)
	return TargetRatio{}
}

// TestPyTorchRatios: the report's ratios come from the same run's
// trainings, with the equal-workers target on equal workers, the mixed
// target under slowdowns, and none where a training missed the target.
func TestPyTorchRatios(t *testing.T) {
	r := pytorchResult()
	eq := r.Ratios(r.Config.Settings[0])
	q := findRatio(t, eq, "time to 97%, mesh-PyTorch ÷ DDP")
	if !q.Known || !near(q.Value, 0.5) || q.Target != 0.8 || !q.Met() {
		t.Fatalf("equal, mesh-PyTorch ÷ DDP: %+v", q)
	}
	if q := findRatio(t, eq, "time to 97% from the first iteration, mesh-PyTorch ÷ DDP"); !q.Known || !near(q.Value, 0.4) || q.Target != 0 {
		t.Fatalf("from the first iteration: %+v", q)
	}
	if q := findRatio(t, eq, "time to 97%, mesh-PyTorch ÷ mesh-Go"); !q.Known || !near(q.Value, 1.5) || q.Target != 0 || !q.Met() {
		t.Fatalf("mesh-PyTorch ÷ mesh-Go: %+v", q)
	}
	if q := findRatio(t, eq, "time to 97%, mesh-Go ÷ DDP"); !q.Known || !near(q.Value, 1.0/3) {
		t.Fatalf("mesh-Go ÷ DDP: %+v", q)
	}
	if q := findRatio(t, eq, "DDP's samples/s ÷ mesh-PyTorch's"); !q.Known || !near(q.Value, 4000.0/6000) || q.Target != 1 || !q.Met() {
		t.Fatalf("samples/s: %+v", q)
	}
	if q := findRatio(t, eq, "a trainer's wait"); !q.Known || !near(q.Value, 0.1) || q.Target != 0.2 || !q.Met() {
		t.Fatalf("wait: %+v", q)
	}
	// Bridges: the mean over nodes of iteration 25 ms, node-side 1 ms
	// (4 %); trainer-side only where the log gave it: 400 µs of 25 ms.
	if q := findRatio(t, eq, "bridge ÷ iteration, node-side"); !q.Known || !near(q.Value, 0.04) || q.Target != 0.1 || !q.Met() {
		t.Fatalf("bridge node-side: %+v", q)
	}
	if q := findRatio(t, eq, "bridge ÷ iteration, trainer-side"); !q.Known || !near(q.Value, 0.016) || !q.Met() {
		t.Fatalf("bridge trainer-side: %+v", q)
	}

	mixed := r.Ratios(r.Config.Settings[1])
	q = findRatio(t, mixed, "time to 97%, mesh-PyTorch ÷ DDP")
	// DDP short of the target within the 10-minute limit: 50 s ÷ 600 s
	// bounds the ratio from above.
	if !q.Known || !q.Bound || !near(q.Value, 50.0/600) || q.Target != 0.5 || !q.Met() {
		t.Fatalf("mixed with DDP short of the target: %+v", q)
	}
	if !strings.Contains(q.String(), "< 0.08") || !strings.Contains(q.String(), "met") {
		t.Fatalf("a bound written as %q", q)
	}
	// Neither at the target: unknown, and not met.
	r.Runs[3].ToTarget = NotReached
	q = findRatio(t, r.Ratios(r.Config.Settings[1]), "time to 97%, mesh-PyTorch ÷ DDP")
	if q.Known || q.Met() || !strings.Contains(q.String(), "NOT met") || !strings.Contains(q.String(), "not measured") {
		t.Fatalf("unknown ratio %+v written as %q", q, q)
	}
	for _, x := range mixed {
		if strings.Contains(x.Name, "mesh-Go") {
			t.Fatalf("mixed has no Go run, yet %v", x)
		}
	}
	if q := findRatio(t, mixed, "bridge ÷ iteration, node-side"); q.Known {
		t.Fatalf("mixed PyTorch run had no bridge figures, yet %+v", q)
	}

	// A ratio over the target is not met.
	r.Runs[0].ToTarget = 54 * time.Second
	if q := findRatio(t, r.Ratios(r.Config.Settings[0]), "time to 97%, mesh-PyTorch ÷ DDP"); !near(q.Value, 0.9) || q.Met() {
		t.Fatalf("0.9 against ≤ 0.8: %+v", q)
	}

	md := r.Markdown()
	for _, want := range []string{"## equal", "## mixed (slowdown 1,1,2,4)", "| mesh, PyTorch trainers | 54.0s | 6.0s |", "| PyTorch DDP (gloo) | not reached in 10m0s |",
		"time to 97%, mesh-PyTorch ÷ DDP: 0.90 (target ≤ 0.8: NOT met)", "SGD at lr 0.05, momentum 0.9, constant", "| mean | 25.00 ms | 10.00 ms | 1000 µs | 4.0% | 940000 | 400 µs | 1.6% | 1880000 | 1.5s |",
		"bridge ÷ the iteration's compute (round trip), node-side: 10.0%",
		"bridge ÷ iteration, node-side: 4.0% (target ≤ 10%: met)"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	csv := r.CSV()
	if !strings.Contains(csv, "equal,pytorch,54.00,6.00,0.9710,6000.0,") || !strings.Contains(csv, "mixed,ddp,,") {
		t.Errorf("results.csv:\n%s", csv)
	}
}

// TestBridgesFromStatus: each node's bridge comes from its last poll with
// a trainer attached: copy + round trip − the trainer's compute, over the
// worker's mean iteration.
func TestBridgesFromStatus(t *testing.T) {
	tr := func(it uint64, rt, tu float64) *status.ExternalTrainer {
		return &status.ExternalTrainer{Attached: true, Iterations: it, BytesCopiedPerIter: 940000, CopyMicros: 100, RoundTripMicros: rt, TrainerMicros: tu}
	}
	samples := []launch.Sample{
		{Node: 0, ID: "n0", Up: true, Worker: records.LocalWorker{Iter: 10, ComputeSeconds: 0.1, WaitSeconds: 0.1}, Trainer: tr(10, 9000, 8000)},
		{Node: 1, ID: "n1", Up: true}, // not attached yet
		{Node: 0, ID: "n0", Up: true, Worker: records.LocalWorker{Iter: 100, ComputeSeconds: 1.5, WaitSeconds: 0.5}, Trainer: tr(100, 10000, 9500)},
		{Node: 1, ID: "n1", Up: true, Worker: records.LocalWorker{Iter: 50, ComputeSeconds: 1, WaitSeconds: 0}, Trainer: tr(50, 20000, 19000)},
		{Node: 1, ID: "n1", Up: false}, // gone at the end: its last answer stands
	}
	b := bridges(samples)
	if len(b) != 2 {
		t.Fatalf("bridges: %+v", b)
	}
	if b[0].Node != "n0" || b[0].Iteration != 20*time.Millisecond || b[0].NodeSide != 600*time.Microsecond || b[0].NodeBytes != 940000 || b[0].TrainerSide != -1 {
		t.Fatalf("node 0: %+v", b[0])
	}
	if b[0].Compute != 15*time.Millisecond {
		t.Fatalf("node 0's compute: %v", b[0].Compute)
	}
	if b[1].Iteration != 20*time.Millisecond || b[1].NodeSide != 1100*time.Microsecond || !near(b[1].NodeShare(), 0.055) {
		t.Fatalf("node 1: %+v", b[1])
	}
}

func TestTrainerBridgeFromLog(t *testing.T) {
	log := `mnist_mlp: attached to node-1 (/tmp/x/trainer.sock), 235146 parameters, batch 64, local steps 1
mnist_mlp: 6400 samples, 640 samples/s, loss 0.4000; rounds 100, bridge 512.5 µs/round, wait 3.0 ms/round, 1881168 bytes copied/round
mnist_mlp: stopped (target reached) after 64000 samples in 100.0 s, 640 samples/s; bridge 431.2 µs/round (1881168 bytes copied/round), wait 2.10 ms/round over 1000 rounds, 12 evaluations (1.5 s)
`
	d, n := TrainerBridge(log)
	if d != 431200*time.Nanosecond || n != 1881168 {
		t.Fatalf("final line: %v, %v", d, n)
	}
	d, n = TrainerBridge(strings.Join(strings.Split(log, "\n")[:2], "\n"))
	if d != 512500*time.Nanosecond || n != 1881168 {
		t.Fatalf("progress line: %v, %v", d, n)
	}
	if e := TrainerEvaluating(log); e != 1500*time.Millisecond {
		t.Fatalf("evaluating: %v", e)
	}
	if w := TrainerWaitShare(log); !near(w, 2.1*1000/1e3/100) {
		t.Fatalf("wait share: %v", w)
	}
	if d, n := TrainerBridge("Traceback (most recent call last):\n"); d != -1 || n != -1 {
		t.Fatalf("no figures: %v, %v", d, n)
	}
}

func TestParseDDP(t *testing.T) {
	s, err := ParseDDP("mnist_ddp: 1.0 s, step 100, accuracy 0.9100, loss 0.3000\n" +
		`{"procs": 4, "batch": 64, "time_to_target_s": 12.5, "accuracy": 0.9712, "seconds": 13.1, "samples_per_s": 8000.5, "steps": 900}` + "\n")
	if err != nil || s.TimeToTarget == nil || *s.TimeToTarget != 12.5 || s.SamplesPerSec != 8000.5 || s.Accuracy != 0.9712 {
		t.Fatalf("%+v %v", s, err)
	}
	s, err = ParseDDP(`{"procs": 4, "time_to_target_s": null, "accuracy": 0.95}`)
	if err != nil || s.TimeToTarget != nil {
		t.Fatalf("not reached: %+v %v", s, err)
	}
	if _, err := ParseDDP("Traceback\nRuntimeError: gloo\n"); err == nil || !strings.Contains(err.Error(), "RuntimeError: gloo") {
		t.Fatalf("no summary: %v", err)
	}
}

func TestPyTorchConfigValidate(t *testing.T) {
	c := DefaultPyTorchConfig()
	c.Binary, c.Python, c.Examples = "dssp", "python3", "../../examples/pytorch"
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := c
	bad.Systems = []System{MeshPyTorch, "jax"}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), `"jax"`) {
		t.Fatalf("unknown system: %v", err)
	}
	bad = c
	bad.Python = ""
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "torch") {
		t.Fatalf("no python: %v", err)
	}
	bad.Systems = []System{MeshGo} // the Go mesh alone needs no Python
	if err := bad.Validate(); err != nil {
		t.Fatal(err)
	}
	bad = c
	bad.Examples = t.TempDir()
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "--examples") {
		t.Fatalf("no scripts: %v", err)
	}
	if got := c.trainerCommand(); !strings.HasPrefix(got, "python3 ../../examples/pytorch/mnist_mlp.py --threads 1") {
		t.Fatalf("trainer command %q", got)
	}
	if q := shellQuote("it's"); q != `'it'\''s'` {
		t.Fatalf("quote: %s", q)
	}
}
