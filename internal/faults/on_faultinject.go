//go:build faultinject

package faults

import (
	"math/rand/v2"
	"os"
	"strings"
)

// active is read once from DSSP_FAULTS: this file is compiled only with
// -tags faultinject, so no release binary honours the variable.
var active = func() map[Fault]bool {
	m := map[Fault]bool{}
	for _, name := range strings.Split(os.Getenv("DSSP_FAULTS"), ",") {
		if name = strings.TrimSpace(name); name != "" {
			m[Fault(name)] = true
		}
	}
	return m
}()

// On reports whether f is switched on.
func On(f Fault) bool { return active[f] }

// Coin is true once in n calls on average, differently on every replica:
// the non-determinism Diverge needs.
func Coin(n int) bool { return rand.IntN(n) == 0 }
