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
