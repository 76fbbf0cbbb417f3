// Package cudaops holds the compute side of dssp: backends, layers, models,
// the flat parameter layout, optimizers and datasets.
//
// # Backends
//
// A [Backend] is the set of numeric kernels training needs (GEMM with
// transposes, element-wise ops, reductions, softmax cross-entropy, im2col /
// col2im, max-pool, the SGD/momentum step). Every op reads and writes
// caller-owned host []float32 slices and never retains them. [CPU] is the
// default: pure Go on gonum's float32 BLAS, or OpenBLAS through gonum's netlib
// binding when built with the openblas tag. The CUDA backend lives in
// dsspmesh/cudaops/cuda behind the cuda build tag and registers itself with
// [RegisterBackend]; nothing in the default build imports gorgonia.org/cu,
// whose init exits the process on a host without a GPU.
//
// # Models and the flat layout
//
// A [Model] is a sequence of layers whose parameters are views into one flat
// []float32. The layout is stable: layers in forward order, and within a
// layer its weight then its bias, each a contiguous row-major range (dense
// weights are [out, in], conv weights [outC, inC, kH, kW]). [Model.Layout]
// names every range, so a shard (a contiguous range of the flat vector) can
// say which tensors it holds. Gradients use the same layout.
//
// # Concurrency and ownership
//
// A Model owns scratch memory reused across calls; [Model.Gradient],
// [Model.GradientTo] and [Model.Evaluate] take an internal lock, so
// concurrent calls on one Model are safe but serialized. For parallel
// workers in one process, build one Model each. Inside one call the
// mini-batch is split across goroutines (one per available CPU, see
// [ModelOptions.Workers]) and their gradients are summed in a fixed order,
// so results do not depend on scheduling. The params, x, labels and grad
// slices passed in stay owned by the caller and are not retained after the
// call returns. GradientTo hands the gradient out in pieces of the model's
// scratch instead of one slice (with one goroutine a dense layer's weight
// gradient a block of rows at a time), so its caller need not hold a
// gradient of the model's size.
//
// # Datasets
//
// A [Dataset] yields samples by index. [LoadMNIST] reads IDX files (gzip or
// plain), [LoadCIFAR10] reads the CIFAR-10 binary batches, [NewSynthetic]
// makes a seeded learnable set for tests. [NewLoader] gives each worker a
// deterministic partition of a dataset and a deterministic per-epoch shuffle
// of it. [Order] is the job-wide order of the balance layer, whose workers'
// batches differ: one seeded permutation of the whole set per epoch, laid
// end to end, each worker taking its slice of each round's global batch,
// so every sample is consumed once per epoch. Corrupt or truncated files give a *[FormatError] naming the file and
// the problem; they never panic.
//
// Image sets are held as the files' bytes ([NewBytes]: MNIST's 60000
// training images are 47 MB, not the 188 MB of float32) and a sample is
// converted to float32 when it is read, value = float32(b) / 255: the same
// float, bit for bit, that a conversion of the whole set at load would
// store, so training and evaluation do not change. Synthetic sets are
// float32 ([NewMemory]). A [Memory] is read-only after it is made and safe
// for concurrent Sample calls.
package cudaops
