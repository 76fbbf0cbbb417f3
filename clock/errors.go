package clock

import (
	"errors"
	"fmt"
)

// Sentinel errors. Errors that carry data are the types below; they match
// the sentinels with errors.Is where one applies.
var (
	ErrUnknownWorker = errors.New("clock: unknown worker")
	ErrWorkerExists  = errors.New("clock: worker already present")
	ErrWorkerWaiting = errors.New("clock: worker's previous push is still held")
	ErrBadWorkerID   = errors.New("clock: empty worker id")
	ErrBadPolicy     = errors.New("clock: bad policy")
	ErrBadState      = errors.New("clock: bad gate state")
)

// UnknownWorkerError is returned for a worker that is not in the table.
type UnknownWorkerError struct {
	Worker WorkerID
}

func (e *UnknownWorkerError) Error() string {
	return fmt.Sprintf("clock: unknown worker %q", e.Worker)
}

// Is makes errors.Is(err, ErrUnknownWorker) hold.
func (e *UnknownWorkerError) Is(target error) bool { return target == ErrUnknownWorker }

// DuplicatePushError is a push of an iteration already applied (Iter < Clock).
type DuplicatePushError struct {
	Worker WorkerID
	Iter   int64 // iteration of the rejected push
	Clock  int64 // the worker's clock: the iteration the gate expects next
}

func (e *DuplicatePushError) Error() string {
	return fmt.Sprintf("clock: duplicate push from %q: iteration %d already applied (clock %d)", e.Worker, e.Iter, e.Clock)
}

// FuturePushError is a push of an iteration beyond the next one (Iter > Clock).
type FuturePushError struct {
	Worker WorkerID
	Iter   int64
	Clock  int64
}

func (e *FuturePushError) Error() string {
	return fmt.Sprintf("clock: push from %q for iteration %d but its clock is %d", e.Worker, e.Iter, e.Clock)
}

// PolicyError names the text or value of a policy that is not valid.
type PolicyError struct {
	Text   string // the offending text or value
	Reason string
}

func (e *PolicyError) Error() string {
	return fmt.Sprintf("clock: bad policy %q: %s", e.Text, e.Reason)
}

// Is makes errors.Is(err, ErrBadPolicy) hold.
func (e *PolicyError) Is(target error) bool { return target == ErrBadPolicy }
