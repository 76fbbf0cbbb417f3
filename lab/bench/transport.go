package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"dsspmesh/mesh"
)

// TransportResult compares push-and-reply round trips of one payload over
// the mesh transport with raw quic-go streams under the same TLS
// certificates and flow-control windows, rounds alternated so both see the
// same machine load.
type TransportResult struct {
	Payload   int
	Rounds    int
	RawMiBs   float64 // raw quic-go: payload written, 8-byte ack read
	MeshMiBs  float64 // mesh.QUICTransport: SendFrame payload, RecvFrame a small reply
	Ratio     float64 // MeshMiBs / RawMiBs
	RawRTT    time.Duration
	MeshRTT   time.Duration
	MeshStats mesh.Stats
}

type rpcHeader struct {
	Iter uint64 `msgpack:"i"`
}

// MeasureTransport alternates raw and mesh round trips of payload bytes for
// about d (after a warm-up that grows the flow-control windows).
func MeasureTransport(ctx context.Context, payload int, d time.Duration, log *slog.Logger) (TransportResult, error) {
	res := TransportResult{Payload: payload}
	if payload < 1 || d <= 0 {
		return res, fmt.Errorf("bench: transport payload %d and duration %v must be positive", payload, d)
	}
	ctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	key, err := mesh.GenerateKey()
	if err != nil {
		return res, err
	}
	sec, err := mesh.NewSecurity(key)
	if err != nil {
		return res, err
	}
	tcfg := mesh.DefaultTransportConfig("127.0.0.1:0")
	data := make([]byte, payload)

	// Raw quic-go with the mesh's certificates and windows.
	raw, err := mesh.NewRawQUIC(ctx, sec, tcfg, payload)
	if err != nil {
		return res, fmt.Errorf("bench: %w", err)
	}
	defer raw.Close()
	raw.SetDeadline(time.Now().Add(d + 30*time.Second))
	rawRPC := raw.RPC

	// The mesh transport between two nodes.
	server, err := newQUIC(sec, "server", tcfg, log)
	if err != nil {
		return res, err
	}
	defer server.Close()
	client, err := newQUIC(sec, "client", tcfg, log)
	if err != nil {
		return res, err
	}
	defer client.Close()
	ch := mesh.Channel{Kind: mesh.KindRPC, Shard: 1}
	mln, err := server.Listen(ch)
	if err != nil {
		return res, err
	}
	go echo(ctx, mln, false)
	ms, err := client.Dial(ctx, "server", server.Addr(), ch)
	if err != nil {
		return res, fmt.Errorf("bench: mesh dial: %w", err)
	}
	defer ms.Close()
	ms.SetDeadline(time.Now().Add(d + 30*time.Second))
	var iter uint64
	meshRPC := func() error {
		iter++
		if err := ms.SendFrame(rpcHeader{Iter: iter}, data); err != nil {
			return fmt.Errorf("bench: mesh send: %w", err)
		}
		var h rpcHeader
		if _, err := ms.RecvFrame(&h); err != nil {
			return fmt.Errorf("bench: mesh recv: %w", err)
		}
		if h.Iter != iter {
			return fmt.Errorf("bench: mesh reply for %d, want %d", h.Iter, iter)
		}
		return nil
	}

	for range 20 {
		if err := errors.Join(rawRPC(), meshRPC()); err != nil {
			return res, err
		}
	}
	var rawT, meshT time.Duration
	end := time.Now().Add(d)
	for time.Now().Before(end) && ctx.Err() == nil {
		t0 := time.Now()
		if err := rawRPC(); err != nil {
			return res, err
		}
		t1 := time.Now()
		if err := meshRPC(); err != nil {
			return res, err
		}
		rawT += t1.Sub(t0)
		meshT += time.Since(t1)
		res.Rounds++
	}
	if res.Rounds == 0 {
		return res, ctx.Err()
	}
	mib := float64(res.Rounds) * float64(payload) / (1 << 20)
	res.RawMiBs, res.MeshMiBs = mib/rawT.Seconds(), mib/meshT.Seconds()
	res.Ratio = res.MeshMiBs / res.RawMiBs
	res.RawRTT, res.MeshRTT = rawT/time.Duration(res.Rounds), meshT/time.Duration(res.Rounds)
	res.MeshStats = client.Stats()
	return res, nil
}

func newQUIC(sec *mesh.Security, id mesh.NodeID, cfg mesh.TransportConfig, log *slog.Logger) (*mesh.QUICTransport, error) {
	creds, err := sec.Node(id)
	if err != nil {
		return nil, err
	}
	return mesh.NewQUICTransport(cfg, creds, log)
}

// echo answers every frame on every stream accepted on ln with a small
// header (and the payload back if withPayload), until ctx ends or ln closes.
func echo(ctx context.Context, ln mesh.Listener, withPayload bool) {
	for {
		s, err := ln.Accept(ctx)
		if err != nil {
			return
		}
		go func() {
			defer s.Close()
			for {
				var h rpcHeader
				p, err := s.RecvFrame(&h)
				if err != nil {
					return
				}
				if !withPayload {
					p = nil
				}
				if err := s.SendFrame(h, p); err != nil {
					return
				}
			}
		}()
	}
}
