// Package cuda is the CUDA backend of cudaops, built only with the cuda
// build tag (go build -tags cuda). Without the tag this package is empty, so
// importing it is always safe; with the tag it links gorgonia.org/cu, whose
// init exits the process on a host without a usable GPU driver, and it
// registers the backend "cuda" with cudaops.RegisterBackend.
//
// The backend keeps one CUDA context on device 0, locked to a dedicated OS
// thread: every op is sent to that goroutine, so the Backend may be called
// from any goroutine (calls are serialized). Each op copies its host inputs
// into device buffers that are reused across calls (grown on demand), runs
// cuBLAS SGEMM or kernels compiled at start-up with NVRTC, and copies the
// results back. The per-op host↔device copies make it a correctness-first
// backend: it shows every op running on the GPU and matching the CPU, not
// peak GPU throughput.
package cuda
