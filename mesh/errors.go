package mesh

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors of the mesh package.
var (
	ErrClosed       = errors.New("mesh: closed")
	ErrBadFrame     = errors.New("mesh: bad frame")
	ErrBadKey       = errors.New("mesh: bad mesh key")
	ErrChannelInUse = errors.New("mesh: channel already has a listener")
	ErrNoRoute      = errors.New("mesh: peer unreachable")
	// ErrDialTimeout marks a dial whose handshake did not finish before
	// its deadline (the transport's HandshakeTimeout or the caller's):
	// quic-go then returns the context's error, not a HandshakeTimeoutError.
	ErrDialTimeout    = errors.New("mesh: handshake not finished before the dial's deadline")
	ErrPeerIdentity   = errors.New("mesh: peer identity mismatch")
	ErrBadPreamble    = errors.New("mesh: bad stream preamble")
	ErrNotJoined      = errors.New("mesh: no seed answered")
	ErrUnknownChannel = errors.New("mesh: no listener for channel")
)

// FrameError says why a frame from a peer was refused; it wraps ErrBadFrame.
type FrameError struct {
	Peer   NodeID
	Reason string
}

func (e *FrameError) Error() string {
	return fmt.Sprintf("mesh: bad frame from %q: %s", e.Peer, e.Reason)
}

func (e *FrameError) Unwrap() error { return ErrBadFrame }

// JoinError reports that no seed answered a join within the allowed attempts.
type JoinError struct {
	Seeds    []string
	Attempts int
	Last     error
}

func (e *JoinError) Error() string {
	return fmt.Sprintf("mesh: no seed answered after %d attempts (seeds: %s): %v",
		e.Attempts, strings.Join(e.Seeds, ", "), e.Last)
}

func (e *JoinError) Unwrap() []error { return []error{ErrNotJoined, e.Last} }
