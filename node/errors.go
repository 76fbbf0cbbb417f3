package node

import (
	"errors"
	"fmt"
	"syscall"
)

// bindError names the flag and address of a socket that could not be bound,
// saying plainly when the port is taken.
func bindError(flag, addr string, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%s %s: address already in use (another dssp node, or another program, holds the port)", flag, addr)
	}
	return fmt.Errorf("%s %s: %v", flag, addr, err)
}
