package mesh

import (
	"context"
	"fmt"
	"net"
	"testing"

	"github.com/quic-go/quic-go"
)

// TestOrderlyAndUnreachable: which transport errors mean "closed in
// order" and "peer gone", as the raft log bridge reads them.
func TestOrderlyAndUnreachable(t *testing.T) {
	for _, c := range []struct {
		name                 string
		err                  error
		orderly, unreachable bool
	}{
		{"peer's transport closed", &quic.ApplicationError{Remote: true, ErrorCode: codeClosing, ErrorMessage: closeMessage}, true, false},
		{"wrapped local close", fmt.Errorf("read: %w", &quic.ApplicationError{ErrorCode: codeClosing, ErrorMessage: closeMessage}), true, false},
		{"stream closed by Close", &quic.StreamError{StreamID: 5, Remote: true, ErrorCode: codeClosed}, true, false},
		{"stream canceled with code 0", &quic.StreamError{StreamID: 5, Remote: true}, true, false},
		{"this transport closed", fmt.Errorf("x: %w", ErrClosed), true, false},
		{"net closed", net.ErrClosed, true, false},
		{"refused identity", &quic.ApplicationError{Remote: true, ErrorCode: codeClosing, ErrorMessage: "bad identity"}, false, false},
		{"bad frame reset", &quic.StreamError{Remote: true, ErrorCode: codeBadFrame}, false, false},
		{"not a member", fmt.Errorf("mesh: node %q is not a live member: %w", "n2", ErrNoRoute), false, true},
		{"idle timeout", fmt.Errorf("dial: %w", &quic.IdleTimeoutError{}), false, true},
		{"handshake timeout", &quic.HandshakeTimeoutError{}, false, true},
		{"dial deadline", fmt.Errorf("mesh: connect to n2 at a: %w", fmt.Errorf("%w: %w", ErrDialTimeout, context.DeadlineExceeded)), false, true},
		{"stateless reset", &quic.StatelessResetError{}, false, false},
		{"protocol error", &quic.TransportError{ErrorCode: quic.ProtocolViolation}, false, false},
		{"other", fmt.Errorf("disk full"), false, false},
		{"nil", nil, false, false},
	} {
		if got := Orderly(c.err); got != c.orderly {
			t.Errorf("%s: Orderly(%v) = %v", c.name, c.err, got)
		}
		if got := Unreachable(c.err); got != c.unreachable {
			t.Errorf("%s: Unreachable(%v) = %v", c.name, c.err, got)
		}
	}
}
