package mesh

import (
	"errors"
	"net"

	"github.com/quic-go/quic-go"
)

// QUIC application error codes sent when we abort a stream or connection.
const (
	codeClosing    quic.ApplicationErrorCode = 0
	codeBadFrame   quic.StreamErrorCode      = 1
	codeNoListener quic.StreamErrorCode      = 2
	codeBadPreamb  quic.StreamErrorCode      = 3
	codeClosed     quic.StreamErrorCode      = 4
)

// closeMessage is the reason a transport gives the connections it closes
// when it shuts down (Close, or a connection arriving after it).
const closeMessage = "transport closed"

// Orderly reports whether err says only that a connection or stream was
// closed in order: a transport shutting down (this node's: ErrClosed or
// net.ErrClosed; the peer's: its "transport closed" close), or a stream
// ended by either side's Close. A reset for a bad frame or preamble, a
// refused identity, a connection limit or a timeout is not orderly.
func Orderly(err error) bool {
	if err == nil {
		return false
	}
	if ae, ok := errors.AsType[*quic.ApplicationError](err); ok {
		return ae.ErrorCode == codeClosing && (ae.ErrorMessage == closeMessage || ae.ErrorMessage == "")
	}
	if se, ok := errors.AsType[*quic.StreamError](err); ok {
		return se.ErrorCode == codeClosed || se.ErrorCode == 0
	}
	// Every error of a QUIC connection's end unwraps to net.ErrClosed:
	// only a close without one (the local listener's or stream's) is orderly.
	if Unreachable(err) || isQUICFailure(err) {
		return false
	}
	return errors.Is(err, ErrClosed) || errors.Is(err, net.ErrClosed)
}

// isQUICFailure reports a QUIC connection that ended by a protocol error,
// a stateless reset or a failed version negotiation.
func isQUICFailure(err error) bool {
	if _, ok := errors.AsType[*quic.TransportError](err); ok {
		return true
	}
	if _, ok := errors.AsType[*quic.StatelessResetError](err); ok {
		return true
	}
	_, ok := errors.AsType[*quic.VersionNegotiationError](err)
	return ok
}

// Unreachable reports whether err says the peer cannot be reached now:
// membership no longer lists it (ErrNoRoute), or its QUIC connection
// timed out, idle or in the handshake (a killed or partitioned peer), or
// a dial's deadline passed before its handshake finished (ErrDialTimeout).
func Unreachable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrNoRoute) || errors.Is(err, ErrDialTimeout) {
		return true
	}
	if _, ok := errors.AsType[*quic.IdleTimeoutError](err); ok {
		return true
	}
	_, ok := errors.AsType[*quic.HandshakeTimeoutError](err)
	return ok
}

// PeerRestarted reports whether err says the peer answered a connection
// of its previous process with a stateless reset: it restarted (a killed
// node back on its address) and holds none of the old connection's state.
// The next dial reaches the new process.
func PeerRestarted(err error) bool {
	_, ok := errors.AsType[*quic.StatelessResetError](err)
	return ok
}

// NoListener reports whether err says the peer refused a stream because
// nothing there listens on its channel (yet, or any more): a shard replica
// that has not started, or has stopped, on a running node.
func NoListener(err error) bool {
	se, ok := errors.AsType[*quic.StreamError](err)
	return ok && se.Remote && se.ErrorCode == codeNoListener
}
