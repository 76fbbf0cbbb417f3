//go:build cuda

package cuda

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"dsspmesh/cudaops"
)

// These tests need a GPU: built with -tags cuda they run every op on the
// device and on cudaops.CPU with the same random inputs and compare.

func newBackend(t *testing.T) *Backend {
	t.Helper()
	b, err := New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func rnd(rng *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(rng.NormFloat64())
	}
	return s
}

func close32(t *testing.T, op string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: len %d, want %d", op, len(got), len(want))
	}
	for i := range want {
		if d := math.Abs(float64(got[i] - want[i])); d > tol*(1+math.Abs(float64(want[i]))) {
			t.Fatalf("%s: element %d = %v, CPU %v", op, i, got[i], want[i])
		}
	}
}

// pair runs op on the CUDA backend and on the CPU, each on its own copy of
// the inputs, and returns both copies for comparison.
func pair(b *Backend, in [][]float32, op func(be cudaops.Backend, s [][]float32)) (gpu, cpu [][]float32) {
	cp := func() [][]float32 {
		out := make([][]float32, len(in))
		for i, s := range in {
			out[i] = slices.Clone(s)
		}
		return out
	}
	gpu, cpu = cp(), cp()
	op(b, gpu)
	op(cudaops.CPU{}, cpu)
	return gpu, cpu
}

func TestOpsMatchCPU(t *testing.T) {
	b := newBackend(t)
	rng := rand.New(rand.NewPCG(1, 1))
	const rows, cols = 37, 23
	check := func(name string, in [][]float32, outs []int, tol float64, op func(be cudaops.Backend, s [][]float32)) {
		t.Run(name, func(t *testing.T) {
			gpu, cpu := pair(b, in, op)
			for _, o := range outs {
				close32(t, name, gpu[o], cpu[o], tol)
			}
		})
	}
	for _, tc := range []struct{ ta, tb bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		m, n, k := 19, 31, 13
		check("gemm", [][]float32{rnd(rng, m*k), rnd(rng, k*n), rnd(rng, m*n)}, []int{2}, 1e-4, func(be cudaops.Backend, s [][]float32) {
			lda, ldb := k, n
			if tc.ta {
				lda = m
			}
			if tc.tb {
				ldb = k
			}
			be.Gemm(tc.ta, tc.tb, m, n, k, 0.7, s[0], lda, s[1], ldb, 0.3, s[2], n)
		})
	}
	check("add_row_vector", [][]float32{rnd(rng, rows*cols), rnd(rng, cols)}, []int{0}, 1e-6, func(be cudaops.Backend, s [][]float32) {
		be.AddRowVector(s[0], s[1], rows, cols)
	})
	check("add_col_vector", [][]float32{rnd(rng, rows*cols), rnd(rng, rows)}, []int{0}, 1e-6, func(be cudaops.Backend, s [][]float32) {
		be.AddColVector(s[0], s[1], rows, cols)
	})
	check("sum_rows_into", [][]float32{rnd(rng, cols), rnd(rng, rows*cols)}, []int{0}, 1e-5, func(be cudaops.Backend, s [][]float32) {
		be.SumRowsInto(s[0], s[1], rows, cols)
	})
	check("sum_cols_into", [][]float32{rnd(rng, rows), rnd(rng, rows*cols)}, []int{0}, 1e-5, func(be cudaops.Backend, s [][]float32) {
		be.SumColsInto(s[0], s[1], rows, cols)
	})
	check("relu", [][]float32{make([]float32, 999), rnd(rng, 999)}, []int{0}, 0, func(be cudaops.Backend, s [][]float32) {
		be.ReLU(s[0], s[1])
	})
	check("relu_backward", [][]float32{make([]float32, 999), rnd(rng, 999), rnd(rng, 999)}, []int{0}, 0, func(be cudaops.Backend, s [][]float32) {
		be.ReLUBackward(s[0], s[1], s[2])
	})
	check("axpy", [][]float32{rnd(rng, 999), rnd(rng, 999)}, []int{1}, 1e-6, func(be cudaops.Backend, s [][]float32) {
		be.Axpy(-1.5, s[0], s[1])
	})
	check("scale", [][]float32{rnd(rng, 999)}, []int{0}, 1e-6, func(be cudaops.Backend, s [][]float32) {
		be.Scale(0.25, s[0])
	})
	labels := make([]int, rows)
	for i := range labels {
		labels[i] = rng.IntN(cols)
	}
	var lossGPU, lossCPU float64
	check("softmax_xent", [][]float32{make([]float32, rows*cols), rnd(rng, rows*cols)}, []int{0}, 1e-5, func(be cudaops.Backend, s [][]float32) {
		l := be.SoftmaxCrossEntropy(s[0], s[1], labels, rows, cols)
		if be.Name() == "cuda" {
			lossGPU = l
		} else {
			lossCPU = l
		}
	})
	if math.Abs(lossGPU-lossCPU) > 1e-4*math.Abs(lossCPU) {
		t.Errorf("softmax loss %v, CPU %v", lossGPU, lossCPU)
	}
	check("softmax_xent_backward", [][]float32{make([]float32, rows*cols), rnd(rng, rows*cols)}, []int{0}, 1e-6, func(be cudaops.Backend, s [][]float32) {
		be.SoftmaxCrossEntropyBackward(s[0], s[1], labels, rows, cols)
	})
	for _, gs := range [][7]int{{3, 9, 8, 3, 3, 1, 1}, {2, 11, 11, 5, 5, 2, 2}, {1, 28, 28, 5, 5, 1, 2}} {
		g, err := cudaops.NewConvGeom(gs[0], gs[1], gs[2], gs[3], gs[4], gs[5], gs[6])
		if err != nil {
			t.Fatal(err)
		}
		check("im2col", [][]float32{make([]float32, g.PatchLen*g.Cols), rnd(rng, g.C*g.H*g.W)}, []int{0}, 0, func(be cudaops.Backend, s [][]float32) {
			be.Im2Col(s[0], s[1], g)
		})
		check("col2im", [][]float32{rnd(rng, g.C*g.H*g.W), rnd(rng, g.PatchLen*g.Cols)}, []int{0}, 1e-5, func(be cudaops.Backend, s [][]float32) {
			be.Col2Im(s[0], s[1], g)
		})
	}
	for _, p := range [][3]int{{2, 2, 12}, {3, 2, 11}} { // window, stride, side
		k, stride, side := p[0], p[1], p[2]
		planes := 5
		out := planes * cudaops.PoolOut(side, k, stride) * cudaops.PoolOut(side, k, stride)
		x := rnd(rng, planes*side*side)
		argGPU, argCPU := make([]int32, out), make([]int32, out)
		check("maxpool", [][]float32{make([]float32, out), x}, []int{0}, 0, func(be cudaops.Backend, s [][]float32) {
			a := argCPU
			if be.Name() == "cuda" {
				a = argGPU
			}
			be.MaxPool(s[0], a, s[1], planes, side, side, k, stride)
		})
		if !slices.Equal(argGPU, argCPU) {
			t.Errorf("maxpool argmax differs")
		}
		check("maxpool_backward", [][]float32{make([]float32, len(x)), rnd(rng, out)}, []int{0}, 1e-6, func(be cudaops.Backend, s [][]float32) {
			be.MaxPoolBackward(s[0], s[1], argCPU)
		})
	}
	check("sgd_step", [][]float32{rnd(rng, 999), rnd(rng, 999), rnd(rng, 999)}, []int{0, 2}, 1e-6, func(be cudaops.Backend, s [][]float32) {
		be.SGDStep(s[0], s[1], s[2], 0.1, 0.9, 0.01)
	})
}

// TestModelGradientMatchesCPU runs a whole LeNet gradient on both backends.
func TestModelGradientMatchesCPU(t *testing.T) {
	b := newBackend(t)
	gpuModel, err := cudaops.NewModel("lenet", cudaops.ModelOptions{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	cpuModel, _ := cudaops.NewModel("lenet", cudaops.ModelOptions{})
	rng := rand.New(rand.NewPCG(2, 2))
	const n = 16
	x := rnd(rng, n*cpuModel.InputSize())
	labels := make([]int, n)
	for i := range labels {
		labels[i] = rng.IntN(10)
	}
	p := cpuModel.Init(1)
	gg, gc := make([]float32, len(p)), make([]float32, len(p))
	lg, err := gpuModel.Gradient(p, x, labels, gg)
	if err != nil {
		t.Fatal(err)
	}
	lc, _ := cpuModel.Gradient(p, x, labels, gc)
	if math.Abs(lg-lc) > 1e-4 {
		t.Fatalf("loss %v, CPU %v", lg, lc)
	}
	close32(t, "lenet gradient", gg, gc, 1e-3)
}
