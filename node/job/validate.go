package job

import (
	"fmt"
	"math"
)

// MaxLR is the highest --lr: far above any rate that trains.
const MaxLR = 100

// CheckFloat returns an error naming flag and v unless v is finite and in
// [lo, hi] (lo excluded when loOpen).
func CheckFloat(flag string, v, lo, hi float64, loOpen bool) error {
	left := "["
	if loOpen {
		left = "("
	}
	ok := !math.IsNaN(v) && !math.IsInf(v, 0) && v <= hi && (v > lo || !loOpen && v == lo)
	if !ok {
		return fmt.Errorf("--%s %v: must be a finite number in %s%g, %g]", flag, v, left, lo, hi)
	}
	return nil
}
