package mesh

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/quic-go/quic-go"
)

// RawQUIC is the baseline the transport's cost is measured against (the
// mesh benchmark and `dssp-lab bench`): one raw quic-go stream on loopback,
// with the mesh's certificates and cfg's flow-control windows but none of
// the transport's framing, whose server reads payload bytes and answers an
// 8-byte ack. Not safe for concurrent use.
type RawQUIC struct {
	ln      *quic.Listener
	conn    *quic.Conn
	s       *quic.Stream
	payload []byte
}

// NewRawQUIC starts the echo server and dials it. ctx bounds the dial and
// the server's accept.
func NewRawQUIC(ctx context.Context, sec *Security, cfg TransportConfig, payload int) (*RawQUIC, error) {
	srvCreds, err := sec.Node("raw-server")
	if err != nil {
		return nil, err
	}
	cliCreds, err := sec.Node("raw-client")
	if err != nil {
		return nil, err
	}
	qconf := &quic.Config{MaxStreamReceiveWindow: cfg.StreamWindow, MaxConnectionReceiveWindow: cfg.ConnWindow}
	ln, err := quic.ListenAddr("127.0.0.1:0", srvCreds.ServerTLS(), qconf)
	if err != nil {
		return nil, fmt.Errorf("mesh: raw quic listen: %w", err)
	}
	go func() {
		c, err := ln.Accept(ctx)
		if err != nil {
			return
		}
		s, err := c.AcceptStream(ctx)
		if err != nil {
			return
		}
		buf := make([]byte, payload)
		var ack [8]byte
		for {
			if _, err := io.ReadFull(s, buf); err != nil {
				return
			}
			if _, err := s.Write(ack[:]); err != nil {
				return
			}
		}
	}()
	conn, err := quic.DialAddr(ctx, ln.Addr().String(), cliCreds.ClientTLS("raw-server"), qconf)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("mesh: raw quic dial: %w", err)
	}
	s, err := conn.OpenStreamSync(ctx)
	if err != nil {
		conn.CloseWithError(0, "")
		ln.Close()
		return nil, fmt.Errorf("mesh: raw quic stream: %w", err)
	}
	return &RawQUIC{ln: ln, conn: conn, s: s, payload: make([]byte, payload)}, nil
}

// RPC writes one payload and waits for its ack.
func (r *RawQUIC) RPC() error {
	if _, err := r.s.Write(r.payload); err != nil {
		return fmt.Errorf("mesh: raw quic write: %w", err)
	}
	var ack [8]byte
	if _, err := io.ReadFull(r.s, ack[:]); err != nil {
		return fmt.Errorf("mesh: raw quic read: %w", err)
	}
	return nil
}

// SetDeadline bounds every later RPC.
func (r *RawQUIC) SetDeadline(t time.Time) error { return r.s.SetDeadline(t) }

// Close ends the connection and the server.
func (r *RawQUIC) Close() error {
	r.conn.CloseWithError(0, "")
	return r.ln.Close()
}
