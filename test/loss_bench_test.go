package test

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"testing"
	"time"

	"dsspmesh/internal/testlogger"
	"dsspmesh/mesh"
)

// BenchmarkPushUnderLoss (bug 9) times a push round trip — a 240 KiB
// gradient frame out, a 240 KiB parameter frame back, the size of one
// shard's slice of the MLP — between two mesh QUIC transports through the
// fault suite's UDP proxy, lossless and then with the lossy step's
// impairments one at a time and together, and prints each median over the
// lossless one (the target: ≤ 3× at 5 % loss). Run it alone (heavy):
//
//	flock /tmp/dssp-heavy.lock go test ./test -run '^$' -bench PushUnderLoss -benchtime 1x -v
func BenchmarkPushUnderLoss(b *testing.B) {
	const size, rounds = 240 << 10, 60
	log := testlogger.New(b, slog.LevelWarn)
	key, err := mesh.GenerateKey()
	if err != nil {
		b.Fatal(err)
	}
	sec, err := mesh.NewSecurity(key)
	if err != nil {
		b.Fatal(err)
	}
	trs := make([]*mesh.QUICTransport, 2)
	fn := NewFaultNet(1)
	b.Cleanup(fn.Close)
	for i, id := range []mesh.NodeID{"a", "b"} {
		creds, err := sec.Node(id)
		if err != nil {
			b.Fatal(err)
		}
		tr, err := mesh.NewQUICTransport(mesh.DefaultTransportConfig("127.0.0.1:0"), creds, log)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { tr.Close() })
		trs[i] = tr
		_, port, _ := net.SplitHostPort(tr.Addr())
		p, _ := net.LookupPort("udp", port)
		fn.Own(p, i)
	}
	ch := mesh.Channel{Kind: mesh.KindRPC, Shard: 1}
	ln, err := trs[1].Listen(ch)
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		for {
			s, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			go func() {
				defer s.Close()
				for {
					var h struct{ N int }
					p, err := s.RecvFrame(&h)
					if err != nil || s.SendFrame(h, p) != nil {
						return
					}
				}
			}()
		}
	}()
	proxy, err := fn.ProxyUDP(1, trs[1].Addr())
	if err != nil {
		b.Fatal(err)
	}
	s, err := trs[0].Dial(context.Background(), "b", proxy, ch)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	payload := make([]byte, size)
	median := func(loss, dup float64, delay, jitter time.Duration) time.Duration {
		fn.Lossy(loss, dup, delay, jitter)
		var ts []time.Duration
		for i := range rounds {
			start := time.Now()
			if err := s.SendFrame(struct{ N int }{i}, payload); err != nil {
				b.Fatal(err)
			}
			var h struct{ N int }
			if _, err := s.RecvFrame(&h); err != nil {
				b.Fatal(err)
			}
			ts = append(ts, time.Since(start))
		}
		slices.Sort(ts)
		return ts[len(ts)/2]
	}
	for range b.N {
		clean := median(0, 0, 0, 0)
		loss := median(0.05, 0, 0, 0)
		delay := median(0, 0, 3*time.Millisecond, 0)
		jitter := median(0, 0, time.Millisecond, 4*time.Millisecond)
		all := median(0.05, 0.02, time.Millisecond, 4*time.Millisecond)
		b.ReportMetric(float64(clean.Microseconds())/1e3, "ms-lossless")
		b.ReportMetric(float64(loss)/float64(clean), "x-loss5%")
		b.Logf("push round trip of %d KiB each way, median of %d: lossless %s; 5%% loss %s (%.1f×); "+
			"3 ms delay %s (%.1f×); 1–5 ms jitter %s (%.1f×); the lossy step (5%% loss, 2%% dup, 1–5 ms) %s (%.1f×)",
			size>>10, rounds, clean, loss, float64(loss)/float64(clean), delay, float64(delay)/float64(clean),
			jitter, float64(jitter)/float64(clean), all, float64(all)/float64(clean))
	}
}
