package cudaops

import (
	"math"
	"math/rand/v2"
	"testing"
)

func randSlice(rng *rand.Rand, n int, scale float64) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(rng.NormFloat64() * scale)
	}
	return s
}

// relErr is ‖a−b‖/max(‖a‖,‖b‖), the usual aggregate gradient-check measure;
// it tolerates the odd component that straddles a ReLU or max-pool kink.
func relErr(a, b []float64) float64 {
	var d, na, nb float64
	for i := range a {
		d += (a[i] - b[i]) * (a[i] - b[i])
		na += a[i] * a[i]
		nb += b[i] * b[i]
	}
	den := math.Sqrt(max(na, nb))
	if den == 0 {
		return 0
	}
	return math.Sqrt(d) / den
}

// layerLoss is L = Σ y·r for a fixed random r, so dL/dy = r.
func layerLoss(l Layer, params [][]float32, x []float32, n int, r []float32) float64 {
	y := l.Forward(CPU{}, params, x, n)
	var s float64
	for i, v := range y {
		s += float64(v) * float64(r[i])
	}
	return s
}

// checkLayer compares the layer's Backward against central differences of
// layerLoss for every input and parameter element.
func checkLayer(t *testing.T, l Layer, n int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 7))
	// Distinct inputs 0.05 apart and at least 0.025 from zero keep every
	// ±eps probe away from ReLU and max-pool kinks.
	x := make([]float32, n*prod(l.InShape()))
	for i, k := range rng.Perm(len(x)) {
		x[i] = (float32(k)-float32(len(x)/2))*0.05 + 0.025
	}
	var params, grads [][]float32
	for _, p := range l.Params() {
		params = append(params, randSlice(rng, p.Size(), 0.5))
		grads = append(grads, make([]float32, p.Size()))
	}
	r := randSlice(rng, n*prod(l.OutShape()), 1)
	l.Forward(CPU{}, params, x, n)
	dx := append([]float32(nil), l.Backward(CPU{}, params, grads, r, n)...)

	const eps = 1e-2
	numeric := func(v []float32) []float64 {
		out := make([]float64, len(v))
		for i := range v {
			orig := v[i]
			v[i] = orig + eps
			up := layerLoss(l, params, x, n, r)
			v[i] = orig - eps
			down := layerLoss(l, params, x, n, r)
			v[i] = orig
			out[i] = (up - down) / (2 * eps)
		}
		return out
	}
	widen := func(v []float32) []float64 {
		out := make([]float64, len(v))
		for i, f := range v {
			out[i] = float64(f)
		}
		return out
	}
	if e := relErr(widen(dx), numeric(x)); e > 1e-3 {
		t.Errorf("%s: input gradient relative error %.2e", l.Name(), e)
	}
	for k, p := range params {
		if e := relErr(widen(grads[k]), numeric(p)); e > 1e-3 {
			t.Errorf("%s: %s gradient relative error %.2e", l.Name(), l.Params()[k].Name, e)
		}
	}
}

func must[L any](l L, err error) L {
	if err != nil {
		panic(err)
	}
	return l
}

func TestLayerGradients(t *testing.T) {
	cases := []Layer{
		NewDense("dense", 7, 5),
		NewReLU("relu", 3, 4, 4),
		NewFlatten("flatten", 2, 3, 3),
		must(NewConv2D("conv", 2, 6, 5, 3, 3, 1, 1)),
		must(NewConv2D("conv-stride", 3, 7, 7, 2, 3, 2, 0)),
		must(NewMaxPool("pool", 2, 6, 6, 2, 2)),
		must(NewMaxPool("pool-overlap", 2, 5, 5, 3, 2)),
	}
	for _, l := range cases {
		t.Run(l.Name(), func(t *testing.T) { checkLayer(t, l, 3) })
	}
}

func TestSoftmaxCrossEntropyGradient(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	const rows, cols = 4, 6
	logits := randSlice(rng, rows*cols, 2)
	labels := []int{0, 5, 2, 2}
	probs := make([]float32, rows*cols)
	loss := func() float64 { return CPU{}.SoftmaxCrossEntropy(probs, logits, labels, rows, cols) }
	loss()
	d := make([]float32, rows*cols)
	CPU{}.SoftmaxCrossEntropyBackward(d, probs, labels, rows, cols)
	an, num := make([]float64, len(d)), make([]float64, len(d))
	const eps = 1e-2
	for i := range logits {
		an[i] = float64(d[i])
		orig := logits[i]
		logits[i] = orig + eps
		up := loss()
		logits[i] = orig - eps
		down := loss()
		logits[i] = orig
		num[i] = (up - down) / (2 * eps)
	}
	if e := relErr(an, num); e > 1e-3 {
		t.Fatalf("softmax cross-entropy gradient relative error %.2e", e)
	}
}

func TestSoftmaxCrossEntropyLargeLogits(t *testing.T) {
	probs := make([]float32, 3)
	loss := CPU{}.SoftmaxCrossEntropy(probs, []float32{1000, 0, -1000}, []int{1}, 1, 3)
	if math.IsInf(loss, 0) || math.IsNaN(loss) || math.Abs(loss-1000) > 1e-3 {
		t.Fatalf("loss %v, want 1000", loss)
	}
}

// TestModelGradients checks each registered model's Gradient against
// central differences of its loss on a random subset of parameters, with
// the batch split across two goroutines.
func TestModelGradients(t *testing.T) {
	for _, name := range ModelNames() {
		if name == "mlp-wide" {
			continue // mlp's layers, 100 times the parameters: each probe is a 25M-parameter forward pass
		}
		t.Run(name, func(t *testing.T) {
			m, err := NewModel(name, ModelOptions{Workers: 2})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(11, 11))
			const n = 16
			x := randSlice(rng, n*m.InputSize(), 1)
			labels := make([]int, n)
			for i := range labels {
				labels[i] = rng.IntN(m.Classes())
			}
			params := m.Init(5)
			grad := make([]float32, m.NumParams())
			if _, err := m.Gradient(params, x, labels, grad); err != nil {
				t.Fatal(err)
			}
			loss := func() float64 { // forward only: the probes need no gradient
				var sum float64
				for _, r := range m.run(params, x, labels, nil, false) {
					sum += r.loss
				}
				return sum / n
			}
			// Check every range of the layout, a few elements each, so
			// every layer's weights and biases are covered.
			const eps = 3e-3
			var an, num []float64
			for _, r := range m.Layout() {
				for range 6 {
					i := r.Offset + rng.IntN(r.Size())
					orig := params[i]
					params[i] = orig + eps
					up := loss()
					params[i] = orig - eps
					down := loss()
					params[i] = orig
					an = append(an, float64(grad[i]))
					num = append(num, (up-down)/(2*eps))
				}
			}
			if e := relErr(an, num); e > 2e-2 {
				t.Fatalf("model gradient relative error %.2e\nanalytic %v\nnumeric  %v", e, an, num)
			}
		})
	}
}
