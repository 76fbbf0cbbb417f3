package cudaops

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestLayoutStable pins the MLP layout: shards and checkpoints depend on it.
func TestLayoutStable(t *testing.T) {
	m, err := NewModel("mlp", ModelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := Layout{
		{Name: "fc1.weight", Offset: 0, Shape: []int{256, 784}},
		{Name: "fc1.bias", Offset: 200704, Shape: []int{256}},
		{Name: "fc2.weight", Offset: 200960, Shape: []int{128, 256}},
		{Name: "fc2.bias", Offset: 233728, Shape: []int{128}},
		{Name: "fc3.weight", Offset: 233856, Shape: []int{10, 128}},
		{Name: "fc3.bias", Offset: 235136, Shape: []int{10}},
	}
	got := m.Layout()
	if len(got) != len(want) {
		t.Fatalf("layout %v", got)
	}
	for i := range want {
		if got[i].Name != want[i].Name || got[i].Offset != want[i].Offset || !slices.Equal(got[i].Shape, want[i].Shape) {
			t.Errorf("range %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if m.NumParams() != 235146 {
		t.Errorf("NumParams %d", m.NumParams())
	}
	if ov := got.Overlapping(200700, 200710); len(ov) != 2 || ov[0].Name != "fc1.weight" || ov[1].Name != "fc1.bias" {
		t.Errorf("Overlapping = %v", ov)
	}
}

func TestLayoutsContiguous(t *testing.T) {
	for _, name := range ModelNames() {
		m, err := NewModel(name, ModelOptions{})
		if err != nil {
			t.Fatal(err)
		}
		off := 0
		seen := map[string]bool{}
		for _, r := range m.Layout() {
			if r.Offset != off || seen[r.Name] {
				t.Fatalf("%s: range %+v at %d (dup %v)", name, r, off, seen[r.Name])
			}
			seen[r.Name] = true
			off = r.End()
		}
		if off != m.NumParams() || len(m.Init(1)) != off {
			t.Fatalf("%s: layout ends at %d, NumParams %d", name, off, m.NumParams())
		}
		t.Logf("%s: %d params in %d ranges", name, off, len(seen))
	}
}

func TestUnknownModel(t *testing.T) {
	_, err := NewModel("resnet", ModelOptions{})
	if !errors.Is(err, ErrUnknownModel) || !strings.Contains(err.Error(), `"resnet"`) || !strings.Contains(err.Error(), "lenet") {
		t.Fatalf("err = %v", err)
	}
	if _, err := NewBackend("tpu"); !errors.Is(err, ErrUnknownBackend) {
		t.Fatalf("backend err = %v", err)
	}
}

func TestInitDeterministic(t *testing.T) {
	m, _ := NewModel("lenet", ModelOptions{})
	a, b, c := m.Init(1), m.Init(1), m.Init(2)
	if !slices.Equal(a, b) || slices.Equal(a, c) {
		t.Fatal("Init is not a function of the seed")
	}
}

// TestGradientSplitMatchesSingle: splitting the batch across goroutines
// gives the same gradient as one goroutine (up to summation order), and
// repeated calls are bit-identical.
func TestGradientSplitMatchesSingle(t *testing.T) {
	one, _ := NewModel("lenet", ModelOptions{Workers: 1})
	four, _ := NewModel("lenet", ModelOptions{Workers: 4})
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 40
	x := randSlice(rng, n*one.InputSize(), 1)
	labels := make([]int, n)
	for i := range labels {
		labels[i] = rng.IntN(10)
	}
	p := one.Init(3)
	g1, g4, g4b := make([]float32, len(p)), make([]float32, len(p)), make([]float32, len(p))
	l1, _ := one.Gradient(p, x, labels, g1)
	l4, _ := four.Gradient(p, x, labels, g4)
	four.Gradient(p, x, labels, g4b)
	if !slices.Equal(g4, g4b) {
		t.Fatal("repeated Gradient calls differ")
	}
	a, b := make([]float64, len(p)), make([]float64, len(p))
	for i := range p {
		a[i], b[i] = float64(g1[i]), float64(g4[i])
	}
	if e := relErr(a, b); e > 1e-5 || abs(l1-l4) > 1e-5 {
		t.Fatalf("split gradient differs: rel %.2e, loss %v vs %v", e, l1, l4)
	}
}

func abs(v float64) float64 { return max(v, -v) }

func TestGradientRejectsBadInput(t *testing.T) {
	m, _ := NewModel("mlp", ModelOptions{})
	p := m.Init(1)
	g := make([]float32, len(p))
	x := make([]float32, 2*784)
	for _, tc := range []struct {
		name   string
		p, x   []float32
		labels []int
		g      []float32
	}{
		{"short params", p[1:], x, []int{1, 2}, g},
		{"short grad", p, x, []int{1, 2}, g[1:]},
		{"x/labels", p, x, []int{1}, g},
		{"label range", p, x, []int{1, 10}, g},
		{"empty", p, nil, nil, g},
	} {
		if _, err := m.Gradient(tc.p, tc.x, tc.labels, tc.g); !errors.Is(err, ErrShape) {
			t.Errorf("%s: err = %v", tc.name, err)
		}
	}
}

func TestSGDStep(t *testing.T) {
	s := SGD{LR: 0.1, Momentum: 0.5, WeightDecay: 0.01}
	p, g, v := []float32{1, -2}, []float32{0.5, 1}, []float32{0.2, 0}
	if err := s.Step(nil, p, g, v); err != nil {
		t.Fatal(err)
	}
	// v = 0.5*v + g + 0.01*p; p -= 0.1*v
	wantV := []float32{0.5*0.2 + 0.5 + 0.01, 1 - 0.02}
	for i := range p {
		if abs(float64(v[i]-wantV[i])) > 1e-6 {
			t.Fatalf("v = %v, want %v", v, wantV)
		}
	}
	if abs(float64(p[0]-(1-0.1*wantV[0]))) > 1e-6 || abs(float64(p[1]-(-2-0.1*wantV[1]))) > 1e-6 {
		t.Fatalf("p = %v", p)
	}
	if err := s.Step(nil, p, g[:1], v); !errors.Is(err, ErrShape) {
		t.Fatalf("mismatched lengths: %v", err)
	}
	if err := (SGD{LR: 0}).Validate(); err == nil || !strings.Contains(err.Error(), "LR 0") {
		t.Fatalf("Validate = %v", err)
	}
}

// TestGradientToMatchesGradient: the gradient GradientTo hands out in
// pieces is Gradient's, every index given once: a dense layer wider than
// gradChunk (handed out in blocks of rows), conv layers (formed whole in
// scratch), and several goroutines (summed, then handed out).
func TestGradientToMatchesGradient(t *testing.T) {
	wide := func(workers int) *Model {
		m, err := NewSequential("wide", []int{1, 28, 28}, 10, []Layer{NewFlatten("flatten", 1, 28, 28),
			NewDense("fc1", 784, 2048), NewReLU("relu1", 2048), NewDense("fc2", 2048, 10)}, ModelOptions{Workers: workers})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	lenet := func(workers int) *Model {
		m, _ := NewModel("lenet", ModelOptions{Workers: workers})
		return m
	}
	for _, tc := range []struct {
		name string
		m    *Model
		n    int
	}{{"wide", wide(1), 12}, {"lenet", lenet(1), 12}, {"lenet-split", lenet(4), 40}, {"wide-small-batch", wide(4), 6}} {
		t.Run(tc.name, func(t *testing.T) {
			if 784*2048 <= 2*gradChunk {
				t.Fatal("the wide layer must exceed gradChunk to be handed out in blocks")
			}
			rng := rand.New(rand.NewPCG(5, 6))
			x := randSlice(rng, tc.n*tc.m.InputSize(), 1)
			labels := make([]int, tc.n)
			for i := range labels {
				labels[i] = rng.IntN(10)
			}
			p := tc.m.Init(7)
			want := make([]float32, len(p))
			lw, err := tc.m.Gradient(p, x, labels, want)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]float32, len(p))
			seen := make([]int, len(p))
			pieces := 0
			lg, err := tc.m.GradientTo(p, x, labels, func(off int, v []float32) {
				pieces++
				copy(got[off:], v)
				for i := range v {
					seen[off+i]++
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			for i, c := range seen {
				if c != 1 {
					t.Fatalf("index %d handed out %d times", i, c)
				}
			}
			a, b := make([]float64, len(p)), make([]float64, len(p))
			for i := range p {
				a[i], b[i] = float64(want[i]), float64(got[i])
			}
			if e := relErr(a, b); e > 1e-6 || lw != lg {
				t.Fatalf("GradientTo differs from Gradient: rel %.2e, loss %v vs %v", e, lg, lw)
			}
			t.Logf("%d pieces, rel diff %.1e", pieces, relErr(a, b))
		})
	}
}

// TestGradientToStepsInPlace: an sgd step taken on the parameters inside
// emit, piece by piece as GradientTo hands the gradient out, equals
// Gradient followed by the step: no piece is handed out before the call
// has read the parameters it covers (a dense layer's input gradient is
// formed before its weights' pieces), one goroutine or several.
func TestGradientToStepsInPlace(t *testing.T) {
	for _, workers := range []int{1, 4} {
		m, err := NewSequential("wide", []int{1, 28, 28}, 10, []Layer{NewFlatten("flatten", 1, 28, 28),
			NewDense("fc1", 784, 1024), NewReLU("relu1", 1024), NewDense("fc2", 1024, 512), NewReLU("relu2", 512),
			NewDense("fc3", 512, 10)}, ModelOptions{Workers: workers})
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(8, 9))
		const n, lr = 40, 0.5
		x := randSlice(rng, n*m.InputSize(), 1)
		labels := make([]int, n)
		for i := range labels {
			labels[i] = rng.IntN(10)
		}
		want := m.Init(3)
		got := slices.Clone(want)
		g := make([]float32, len(want))
		if _, err := m.Gradient(want, x, labels, g); err != nil {
			t.Fatal(err)
		}
		for i := range want {
			want[i] -= lr * g[i]
		}
		if _, err := m.GradientTo(got, x, labels, func(off int, v []float32) {
			for i, gi := range v {
				got[off+i] -= lr * gi
			}
		}); err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if d := math.Abs(float64(want[i] - got[i])); d > 1e-5*(1+math.Abs(float64(want[i]))) {
				t.Fatalf("workers %d: parameter %d is %v stepped in place, %v after Gradient", workers, i, got[i], want[i])
			}
		}
	}
}
