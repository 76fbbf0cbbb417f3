package shard

import "time"

// WallClock is the time source of the receipt times a leader stamps on
// pushes.
type WallClock interface {
	Now() time.Time
}

// SystemClock reads time.Now.
type SystemClock struct{}

func (SystemClock) Now() time.Time { return time.Now() }
