//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"unsafe"

	"gonum.org/v1/gonum/blas"
	"gorgonia.org/cu"
	cublas "gorgonia.org/cu/blas"
	"gorgonia.org/cu/nvrtc"

	"dsspmesh/cudaops"
)

func init() {
	cudaops.RegisterBackend("cuda", func() (cudaops.Backend, error) { return New() })
}

// blockSize is the number of threads per block for every kernel.
const blockSize = 256

// Backend runs cudaops ops on GPU 0. Ops take a mutex and bind the CUDA
// context to the calling OS thread for their duration, so any goroutine may
// call them (they run one at a time). The Backend interface has no error
// results: a CUDA failure inside an op panics with the driver's error, as
// it means the device is unusable.
type Backend struct {
	mu   sync.Mutex
	ctx  cu.CUContext
	blas *cublas.Standard
	fns  map[string]cu.Function
	bufs []devBuf
}

// devBuf is a device allocation reused across ops; slots are numbered per op
// argument so one op's inputs never share memory.
type devBuf struct {
	ptr   cu.DevicePtr
	bytes int64
}

// New creates a context on device 0, compiles the kernels with NVRTC and
// opens a cuBLAS handle.
func New() (*Backend, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	dev, err := cu.GetDevice(0)
	if err != nil {
		return nil, fmt.Errorf("cuda: device 0: %w", err)
	}
	ctx, err := dev.MakeContext(cu.SchedAuto)
	if err != nil {
		return nil, fmt.Errorf("cuda: create context: %w", err)
	}
	b := &Backend{ctx: ctx, fns: map[string]cu.Function{}}
	prog, err := nvrtc.CreateProgram(kernelSource, "dssp_kernels.cu")
	if err != nil {
		return nil, fmt.Errorf("cuda: nvrtc program: %w", err)
	}
	defer prog.Destroy()
	if err := prog.Compile(); err != nil {
		msg, _ := prog.GetLog()
		return nil, fmt.Errorf("cuda: compile kernels: %w\n%s", err, msg)
	}
	ptx, err := prog.GetPTX()
	if err != nil {
		return nil, fmt.Errorf("cuda: get PTX: %w", err)
	}
	mod, err := cu.LoadData(ptx)
	if err != nil {
		return nil, fmt.Errorf("cuda: load PTX: %w", err)
	}
	for _, name := range kernelNames {
		fn, err := mod.Function(name)
		if err != nil {
			return nil, fmt.Errorf("cuda: kernel %s: %w", name, err)
		}
		b.fns[name] = fn
	}
	b.blas = cublas.New()
	return b, nil
}

// Close frees device memory, the cuBLAS handle and the context.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cu.SetCurrentContext(b.ctx); err != nil {
		return err
	}
	for _, d := range b.bufs {
		if d.bytes > 0 {
			cu.MemFree(d.ptr)
		}
	}
	b.bufs = nil
	b.blas.Close()
	return b.ctx.Destroy()
}

// Name implements cudaops.Backend.
func (b *Backend) Name() string { return "cuda" }

// run executes f with the context current on a locked thread; an error
// from f panics (see Backend).
func (b *Backend) run(op string, f func() error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cu.SetCurrentContext(b.ctx); err != nil {
		panic(fmt.Errorf("cuda: %s: set context: %w", op, err))
	}
	if err := f(); err != nil {
		panic(fmt.Errorf("cuda: %s: %w", op, err))
	}
}

// buf returns slot's device buffer, grown to at least bytes.
func (b *Backend) buf(slot int, bytes int64) (cu.DevicePtr, error) {
	for len(b.bufs) <= slot {
		b.bufs = append(b.bufs, devBuf{})
	}
	d := &b.bufs[slot]
	if d.bytes < bytes {
		if d.bytes > 0 {
			if err := cu.MemFree(d.ptr); err != nil {
				return 0, err
			}
			d.bytes = 0
		}
		p, err := cu.MemAlloc(bytes)
		if err != nil {
			return 0, err
		}
		d.ptr, d.bytes = p, bytes
	}
	return d.ptr, nil
}

// upload copies a host slice into slot's buffer.
func upload[T float32 | int32 | int64 | float64](b *Backend, slot int, host []T) (cu.DevicePtr, error) {
	bytes := int64(len(host)) * int64(unsafe.Sizeof(host[0]))
	p, err := b.buf(slot, max(bytes, 8))
	if err != nil || len(host) == 0 {
		return p, err
	}
	return p, cu.MemcpyHtoD(p, unsafe.Pointer(&host[0]), bytes)
}

// download copies len(host) elements from p back to host.
func download[T float32 | int32 | int64 | float64](host []T, p cu.DevicePtr) error {
	if len(host) == 0 {
		return nil
	}
	return cu.MemcpyDtoH(unsafe.Pointer(&host[0]), p, int64(len(host))*int64(unsafe.Sizeof(host[0])))
}

// launch runs kernel name over n threads. Arguments are device pointers,
// ints (passed as 64-bit) and float32s; each goes in an 8-byte cell
// because cu's Launch copies 8 bytes per argument.
func (b *Backend) launch(name string, n int, args ...any) error {
	if n <= 0 {
		return nil
	}
	cells := make([]uint64, len(args))
	params := make([]unsafe.Pointer, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case cu.DevicePtr:
			cells[i] = uint64(v)
		case int:
			cells[i] = uint64(int64(v))
		case float32:
			cells[i] = uint64(math.Float32bits(v))
		default:
			return fmt.Errorf("kernel %s: argument %d has type %T", name, i, a)
		}
		params[i] = unsafe.Pointer(&cells[i])
	}
	if err := b.fns[name].Launch((n+blockSize-1)/blockSize, 1, 1, blockSize, 1, 1, 0, cu.Stream{}, params); err != nil {
		return fmt.Errorf("launch %s: %w", name, err)
	}
	return cu.Synchronize()
}

// devSlice presents device memory as a []float32 for cu/blas, whose
// methods take slices but pass &s[0] straight to cuBLAS. The slice must
// never be read from Go. Reinterpreting the variable's bits (rather than
// converting uintptr to unsafe.Pointer) keeps vet's unsafeptr check quiet;
// the GC ignores pointers outside the Go heap.
func devSlice(p cu.DevicePtr, n int) []float32 {
	return unsafe.Slice((*float32)(*(*unsafe.Pointer)(unsafe.Pointer(&p))), n)
}

func transpose(t bool) blas.Transpose {
	if t {
		return blas.Trans
	}
	return blas.NoTrans
}

// Gemm implements cudaops.Backend with cuBLAS. cuBLAS is column-major and
// cu/blas passes arguments through unchanged, so the row-major product
// C = op(A)·op(B) is computed as the column-major Cᵀ = op(B)ᵀ·op(A)ᵀ, that
// is, with A and B swapped and m and n swapped.
func (b *Backend) Gemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, bm []float32, ldb int, beta float32, c []float32, ldc int) {
	b.run("gemm", func() error {
		da, err := upload(b, 0, a)
		if err != nil {
			return err
		}
		db, err := upload(b, 1, bm)
		if err != nil {
			return err
		}
		dc, err := upload(b, 2, c)
		if err != nil {
			return err
		}
		b.blas.Sgemm(transpose(transB), transpose(transA), n, m, k, alpha,
			devSlice(db, len(bm)), ldb, devSlice(da, len(a)), lda, beta, devSlice(dc, len(c)), ldc)
		if err := b.blas.Err(); err != nil {
			return err
		}
		if err := cu.Synchronize(); err != nil {
			return err
		}
		return download(c, dc)
	})
}

// elementwise uploads ins to slots 0.., runs kernel over n threads with
// the device pointers followed by extra arguments, and downloads outs
// (indices into ins) afterwards.
func (b *Backend) elementwise(kernel string, n int, ins [][]float32, outs []int, extra ...any) {
	b.run(kernel, func() error {
		ptrs := make([]cu.DevicePtr, len(ins))
		args := make([]any, 0, len(ins)+len(extra))
		for i, in := range ins {
			p, err := upload(b, i, in)
			if err != nil {
				return err
			}
			ptrs[i] = p
			args = append(args, p)
		}
		if err := b.launch(kernel, n, append(args, extra...)...); err != nil {
			return err
		}
		for _, o := range outs {
			if err := download(ins[o], ptrs[o]); err != nil {
				return err
			}
		}
		return nil
	})
}

// AddRowVector implements cudaops.Backend.
func (b *Backend) AddRowVector(x, v []float32, rows, cols int) {
	b.elementwise("add_row_vector", rows*cols, [][]float32{x[:rows*cols], v[:cols]}, []int{0}, rows, cols)
}

// AddColVector implements cudaops.Backend.
func (b *Backend) AddColVector(x, v []float32, rows, cols int) {
	b.elementwise("add_col_vector", rows*cols, [][]float32{x[:rows*cols], v[:rows]}, []int{0}, rows, cols)
}

// SumRowsInto implements cudaops.Backend.
func (b *Backend) SumRowsInto(dst, x []float32, rows, cols int) {
	b.elementwise("sum_rows_into", cols, [][]float32{dst[:cols], x[:rows*cols]}, []int{0}, rows, cols)
}

// SumColsInto implements cudaops.Backend.
func (b *Backend) SumColsInto(dst, x []float32, rows, cols int) {
	b.elementwise("sum_cols_into", rows, [][]float32{dst[:rows], x[:rows*cols]}, []int{0}, rows, cols)
}

// ReLU implements cudaops.Backend.
func (b *Backend) ReLU(y, x []float32) {
	b.elementwise("relu", len(x), [][]float32{y[:len(x)], x}, []int{0}, len(x))
}

// ReLUBackward implements cudaops.Backend.
func (b *Backend) ReLUBackward(dx, dy, y []float32) {
	n := len(y)
	b.elementwise("relu_backward", n, [][]float32{dx[:n], dy[:n], y}, []int{0}, n)
}

// Axpy implements cudaops.Backend.
func (b *Backend) Axpy(alpha float32, x, y []float32) {
	n := len(x)
	b.run("axpy", func() error {
		dx, err := upload(b, 0, x)
		if err != nil {
			return err
		}
		dy, err := upload(b, 1, y[:n])
		if err != nil {
			return err
		}
		if err := b.launch("axpy", n, alpha, dx, dy, n); err != nil {
			return err
		}
		return download(y[:n], dy)
	})
}

// Scale implements cudaops.Backend.
func (b *Backend) Scale(alpha float32, x []float32) {
	b.run("scale", func() error {
		dx, err := upload(b, 0, x)
		if err != nil {
			return err
		}
		if err := b.launch("scale", len(x), alpha, dx, len(x)); err != nil {
			return err
		}
		return download(x, dx)
	})
}

func labels64(labels []int, rows int) []int64 {
	out := make([]int64, rows)
	for i := range out {
		out[i] = int64(labels[i])
	}
	return out
}

// SoftmaxCrossEntropy implements cudaops.Backend.
func (b *Backend) SoftmaxCrossEntropy(probs, logits []float32, labels []int, rows, cols int) float64 {
	losses := make([]float64, rows)
	b.run("softmax_xent", func() error {
		dp, err := b.buf(0, int64(rows*cols)*4)
		if err != nil {
			return err
		}
		dl, err := upload(b, 1, losses)
		if err != nil {
			return err
		}
		dx, err := upload(b, 2, logits[:rows*cols])
		if err != nil {
			return err
		}
		dy, err := upload(b, 3, labels64(labels, rows))
		if err != nil {
			return err
		}
		if err := b.launch("softmax_xent", rows, dp, dl, dx, dy, rows, cols); err != nil {
			return err
		}
		if err := download(probs[:rows*cols], dp); err != nil {
			return err
		}
		return download(losses, dl)
	})
	var sum float64
	for _, l := range losses {
		sum += l
	}
	return sum
}

// SoftmaxCrossEntropyBackward implements cudaops.Backend.
func (b *Backend) SoftmaxCrossEntropyBackward(dlogits, probs []float32, labels []int, rows, cols int) {
	n := rows * cols
	b.run("softmax_xent_backward", func() error {
		dd, err := b.buf(0, int64(n)*4)
		if err != nil {
			return err
		}
		dp, err := upload(b, 1, probs[:n])
		if err != nil {
			return err
		}
		dy, err := upload(b, 2, labels64(labels, rows))
		if err != nil {
			return err
		}
		if err := b.launch("softmax_xent_backward", n, dd, dp, dy, rows, cols); err != nil {
			return err
		}
		return download(dlogits[:n], dd)
	})
}

func geomArgs(g cudaops.ConvGeom) []any {
	return []any{g.C, g.H, g.W, g.KH, g.KW, g.Stride, g.Pad, g.OutH, g.OutW}
}

// Im2Col implements cudaops.Backend.
func (b *Backend) Im2Col(col, x []float32, g cudaops.ConvGeom) {
	n := g.PatchLen * g.Cols
	b.elementwise("im2col", n, [][]float32{col[:n], x[:g.C*g.H*g.W]}, []int{0}, geomArgs(g)...)
}

// Col2Im implements cudaops.Backend.
func (b *Backend) Col2Im(dx, col []float32, g cudaops.ConvGeom) {
	n := g.C * g.H * g.W
	b.elementwise("col2im", n, [][]float32{dx[:n], col[:g.PatchLen*g.Cols]}, []int{0}, geomArgs(g)...)
}

// MaxPool implements cudaops.Backend.
func (b *Backend) MaxPool(y []float32, argmax []int32, x []float32, planes, h, w, k, stride int) {
	oh, ow := cudaops.PoolOut(h, k, stride), cudaops.PoolOut(w, k, stride)
	n := planes * oh * ow
	b.run("maxpool", func() error {
		dy, err := b.buf(0, int64(n)*4)
		if err != nil {
			return err
		}
		da, err := b.buf(1, int64(n)*4)
		if err != nil {
			return err
		}
		dx, err := upload(b, 2, x[:planes*h*w])
		if err != nil {
			return err
		}
		if err := b.launch("maxpool", n, dy, da, dx, planes, h, w, k, stride, oh, ow); err != nil {
			return err
		}
		if err := download(y[:n], dy); err != nil {
			return err
		}
		return download(argmax[:n], da)
	})
}

// MaxPoolBackward implements cudaops.Backend.
func (b *Backend) MaxPoolBackward(dx, dy []float32, argmax []int32) {
	n := len(dy)
	b.run("maxpool_backward", func() error {
		ddx, err := upload(b, 0, dx)
		if err != nil {
			return err
		}
		ddy, err := upload(b, 1, dy)
		if err != nil {
			return err
		}
		da, err := upload(b, 2, argmax[:n])
		if err != nil {
			return err
		}
		if err := b.launch("maxpool_backward", n, ddx, ddy, da, n); err != nil {
			return err
		}
		return download(dx, ddx)
	})
}

// SGDStep implements cudaops.Backend.
func (b *Backend) SGDStep(params, grad, velocity []float32, lr, momentum, weightDecay float32) {
	n := len(params)
	b.elementwise("sgd_step", n, [][]float32{params, grad[:n], velocity[:n]}, []int{0, 2}, lr, momentum, weightDecay, n)
}
