//go:build openblas

package cudaops

// The openblas tag routes every float32 BLAS call through gonum's netlib
// cgo binding to Debian's OpenBLAS (apt-get install libopenblas-dev). The
// netlib package leaves the library choice to its user, hence the LDFLAGS.

// #cgo LDFLAGS: -lopenblas
import "C"

import (
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/netlib/blas/netlib"
)

const blasName = "openblas"

func init() { blas32.Use(netlib.Implementation{}) }

// defaultWorkers is ModelOptions.Workers' zero value. OpenBLAS runs each
// GEMM on its own thread pool; goroutines calling it at once contend for
// that pool and ran 1.5-2.3x slower than one caller in BenchmarkTrainStep.
func defaultWorkers() int { return 1 }
