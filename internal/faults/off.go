//go:build !faultinject

package faults

// On is false in every normal build; the compiler drops the branches it
// guards.
func On(Fault) bool { return false }

// Coin is false in every normal build.
func Coin(int) bool { return false }
