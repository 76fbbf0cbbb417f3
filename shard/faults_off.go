//go:build !faultinject

package shard

// faultOn is false in every normal build; the compiler drops the branches
// it guards.
func faultOn(Fault) bool { return false }

func faultCoin(int) bool { return false }
