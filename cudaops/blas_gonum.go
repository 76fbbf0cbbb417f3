//go:build !openblas

package cudaops

import "runtime"

// blasName says which BLAS serves GEMM; see blas_openblas.go.
const blasName = "gonum"

// defaultWorkers is ModelOptions.Workers' zero value: gonum's SGEMM only
// goes parallel on large products, so the model splits batches itself.
func defaultWorkers() int { return runtime.GOMAXPROCS(0) }
