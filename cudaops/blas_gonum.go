//go:build !openblas

package cudaops

// blasName says which BLAS serves GEMM; see blas_openblas.go.
const blasName = "gonum"
