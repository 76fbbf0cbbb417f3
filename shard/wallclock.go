package shard

import "time"

// WallClock is the time source of the receipt times a leader stamps on
// pushes and of the proposer's batch linger.
type WallClock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

// SystemClock reads time.Now and arms time.After.
type SystemClock struct{}

func (SystemClock) Now() time.Time                         { return time.Now() }
func (SystemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
