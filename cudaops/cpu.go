package cudaops

import (
	"math"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
)

// CPU is the host backend. GEMM goes to whatever gonum's blas32 package
// uses: gonum's pure-Go implementation (which splits large products across
// goroutines) or, with the openblas build tag, OpenBLAS. Other ops are
// single-threaded loops; [Model] parallelises across the mini-batch instead.
type CPU struct{}

// Name reports the backend and the BLAS behind it.
func (CPU) Name() string { return "cpu/" + blasName }

func trans(t bool) blas.Transpose {
	if t {
		return blas.Trans
	}
	return blas.NoTrans
}

// Gemm implements [Backend].
func (CPU) Gemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	blas32.Implementation().Sgemm(trans(transA), trans(transB), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// AddRowVector implements [Backend].
func (CPU) AddRowVector(x, v []float32, rows, cols int) {
	v = v[:cols]
	for r := 0; r < rows; r++ {
		row := x[r*cols : (r+1)*cols]
		for c, b := range v {
			row[c] += b
		}
	}
}

// SumRowsInto implements [Backend].
func (CPU) SumRowsInto(dst, x []float32, rows, cols int) {
	dst = dst[:cols]
	for r := 0; r < rows; r++ {
		row := x[r*cols : (r+1)*cols]
		for c, v := range row {
			dst[c] += v
		}
	}
}

// AddColVector implements [Backend].
func (CPU) AddColVector(x, v []float32, rows, cols int) {
	for r := 0; r < rows; r++ {
		b := v[r]
		row := x[r*cols : (r+1)*cols]
		for c := range row {
			row[c] += b
		}
	}
}

// SumColsInto implements [Backend].
func (CPU) SumColsInto(dst, x []float32, rows, cols int) {
	for r := 0; r < rows; r++ {
		var s float32
		for _, v := range x[r*cols : (r+1)*cols] {
			s += v
		}
		dst[r] += s
	}
}

// ReLU implements [Backend].
func (CPU) ReLU(y, x []float32) {
	y = y[:len(x)]
	for i, v := range x {
		if v > 0 {
			y[i] = v
		} else {
			y[i] = 0
		}
	}
}

// ReLUBackward implements [Backend].
func (CPU) ReLUBackward(dx, dy, y []float32) {
	dx = dx[:len(y)]
	dy = dy[:len(y)]
	for i, v := range y {
		if v > 0 {
			dx[i] = dy[i]
		} else {
			dx[i] = 0
		}
	}
}

// Axpy implements [Backend].
func (CPU) Axpy(alpha float32, x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += alpha * v
	}
}

// Scale implements [Backend].
func (CPU) Scale(alpha float32, x []float32) {
	for i := range x {
		x[i] *= alpha
	}
}

// SoftmaxCrossEntropy implements [Backend]. It subtracts the row maximum
// before exponentiating so large logits do not overflow.
func (CPU) SoftmaxCrossEntropy(probs, logits []float32, labels []int, rows, cols int) float64 {
	var loss float64
	for r := 0; r < rows; r++ {
		in := logits[r*cols : (r+1)*cols]
		out := probs[r*cols : (r+1)*cols]
		maxv := in[0]
		for _, v := range in[1:] {
			if v > maxv {
				maxv = v
			}
		}
		var sum float64
		for c, v := range in {
			e := math.Exp(float64(v - maxv))
			out[c] = float32(e)
			sum += e
		}
		inv := 1 / sum
		for c := range out {
			out[c] = float32(float64(out[c]) * inv)
		}
		loss += math.Log(sum) - float64(in[labels[r]]-maxv)
	}
	return loss
}

// SoftmaxCrossEntropyBackward implements [Backend].
func (CPU) SoftmaxCrossEntropyBackward(dlogits, probs []float32, labels []int, rows, cols int) {
	copy(dlogits[:rows*cols], probs[:rows*cols])
	for r := 0; r < rows; r++ {
		dlogits[r*cols+labels[r]] -= 1
	}
}

// Im2Col implements [Backend].
func (CPU) Im2Col(col, x []float32, g ConvGeom) {
	i := 0
	for c := 0; c < g.C; c++ {
		plane := x[c*g.H*g.W : (c+1)*g.H*g.W]
		for ky := 0; ky < g.KH; ky++ {
			for kx := 0; kx < g.KW; kx++ {
				row := col[i*g.Cols : (i+1)*g.Cols]
				i++
				j := 0
				for oy := 0; oy < g.OutH; oy++ {
					iy := oy*g.Stride - g.Pad + ky
					if iy < 0 || iy >= g.H {
						for ox := 0; ox < g.OutW; ox++ {
							row[j] = 0
							j++
						}
						continue
					}
					src := plane[iy*g.W : (iy+1)*g.W]
					for ox := 0; ox < g.OutW; ox++ {
						ix := ox*g.Stride - g.Pad + kx
						if ix < 0 || ix >= g.W {
							row[j] = 0
						} else {
							row[j] = src[ix]
						}
						j++
					}
				}
			}
		}
	}
}

// Col2Im implements [Backend].
func (CPU) Col2Im(dx, col []float32, g ConvGeom) {
	i := 0
	for c := 0; c < g.C; c++ {
		plane := dx[c*g.H*g.W : (c+1)*g.H*g.W]
		for ky := 0; ky < g.KH; ky++ {
			for kx := 0; kx < g.KW; kx++ {
				row := col[i*g.Cols : (i+1)*g.Cols]
				i++
				j := 0
				for oy := 0; oy < g.OutH; oy++ {
					iy := oy*g.Stride - g.Pad + ky
					if iy < 0 || iy >= g.H {
						j += g.OutW
						continue
					}
					dst := plane[iy*g.W : (iy+1)*g.W]
					for ox := 0; ox < g.OutW; ox++ {
						ix := ox*g.Stride - g.Pad + kx
						if ix >= 0 && ix < g.W {
							dst[ix] += row[j]
						}
						j++
					}
				}
			}
		}
	}
}

// PoolOut is the output side of a k×k pool with the given stride over size
// (no padding, partial windows dropped).
func PoolOut(size, k, stride int) int { return (size-k)/stride + 1 }

// MaxPool implements [Backend].
func (CPU) MaxPool(y []float32, argmax []int32, x []float32, planes, h, w, k, stride int) {
	oh, ow := PoolOut(h, k, stride), PoolOut(w, k, stride)
	o := 0
	for p := 0; p < planes; p++ {
		base := p * h * w
		for oy := 0; oy < oh; oy++ {
			for ox := 0; ox < ow; ox++ {
				best := base + oy*stride*w + ox*stride
				bv := x[best]
				for ky := 0; ky < k; ky++ {
					rowStart := base + (oy*stride+ky)*w + ox*stride
					for kx := 0; kx < k; kx++ {
						if v := x[rowStart+kx]; v > bv {
							bv, best = v, rowStart+kx
						}
					}
				}
				y[o] = bv
				argmax[o] = int32(best)
				o++
			}
		}
	}
}

// MaxPoolBackward implements [Backend].
func (CPU) MaxPoolBackward(dx, dy []float32, argmax []int32) {
	for i, a := range argmax[:len(dy)] {
		dx[a] += dy[i]
	}
}

// SGDStep implements [Backend].
func (CPU) SGDStep(params, grad, velocity []float32, lr, momentum, weightDecay float32) {
	grad = grad[:len(params)]
	velocity = velocity[:len(params)]
	for i, p := range params {
		v := momentum*velocity[i] + grad[i] + weightDecay*p
		velocity[i] = v
		params[i] = p - lr*v
	}
}
