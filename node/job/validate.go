package job

import (
	"fmt"
	"math"
	"strconv"
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

// CheckMomentum refuses a --momentum outside [0, 1), or one that float32
// rounds to 1 (a momentum of 1 never forgets a gradient): the optimizer
// keeps it in float32, so 0.99999999999 passes a float64 check and then
// becomes 1.
func CheckMomentum(m float64) error {
	if math.IsNaN(m) || m < 0 || m >= 1 {
		return fmt.Errorf("--momentum %v: must be a finite number in [0, 1)", m)
	}
	if float32(m) >= 1 {
		return fmt.Errorf("--momentum %v: rounds to 1 in float32, the optimizer's precision; it must stay below 1 (at most %s)",
			m, strconv.FormatFloat(float64(math.Nextafter32(1, 0)), 'g', -1, 32))
	}
	return nil
}
