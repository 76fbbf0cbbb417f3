package netlab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"time"
)

// Measured is what a probe between two hosts saw: the round trips of small
// UDP datagrams (median and least) and the rate of one TCP stream.
type Measured struct {
	RTT, MinRTT time.Duration
	Lost        int // of the UDP probes
	Rate        Rate
}

func (m Measured) String() string {
	out := fmt.Sprintf("RTT %.1f ms (min %.1f ms, %d lost)", float64(m.RTT.Microseconds())/1000,
		float64(m.MinRTT.Microseconds())/1000, m.Lost)
	if m.Rate > 0 {
		out += fmt.Sprintf(", TCP %.1f Mbit/s", float64(m.Rate)/1e6)
	}
	return out
}

// Probe measures the path from host from to host to: pings UDP
// datagrams 10 ms apart, then streams TCP for stream (0: no stream),
// from sockets this process opens in the two hosts' namespaces.
func (l *Lab) Probe(ctx context.Context, from, to, pings int, stream time.Duration) (Measured, error) {
	var m Measured
	if from < 0 || to < 0 || from >= len(l.hosts) || to >= len(l.hosts) || from == to {
		return m, fmt.Errorf("netlab: probe from host %d to %d of %d", from, to, len(l.hosts))
	}
	a, b := l.hosts[from], l.hosts[to]
	var srv net.PacketConn
	if err := l.In(b.NS, func() (err error) {
		srv, err = net.ListenPacket("udp", net.JoinHostPort(b.Addr, "0"))
		return err
	}); err != nil {
		return m, fmt.Errorf("netlab: probe: listen on host %d: %w", to, err)
	}
	defer srv.Close()
	go func() {
		buf := make([]byte, 64)
		for {
			n, addr, err := srv.ReadFrom(buf)
			if err != nil {
				return
			}
			srv.WriteTo(buf[:n], addr)
		}
	}()
	var cli net.Conn
	if err := l.In(a.NS, func() (err error) {
		cli, err = net.Dial("udp", srv.LocalAddr().String())
		return err
	}); err != nil {
		return m, fmt.Errorf("netlab: probe: dial from host %d: %w", from, err)
	}
	defer cli.Close()
	var rtts []time.Duration
	buf := make([]byte, 64)
	for k := range pings {
		if ctx.Err() != nil {
			return m, ctx.Err()
		}
		start := time.Now()
		msg := fmt.Appendf(nil, "probe %d", k)
		if _, err := cli.Write(msg); err != nil {
			return m, fmt.Errorf("netlab: probe: %w", err)
		}
		cli.SetReadDeadline(start.Add(2*l.spec.Delay + 500*time.Millisecond))
		for {
			n, err := cli.Read(buf)
			if err != nil {
				m.Lost++
				break
			}
			if string(buf[:n]) == string(msg) {
				rtts = append(rtts, time.Since(start))
				break
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(rtts) > 0 {
		slices.Sort(rtts)
		m.RTT, m.MinRTT = rtts[len(rtts)/2], rtts[0]
	}
	if stream <= 0 {
		return m, nil
	}
	rate, err := l.stream(ctx, a, b, stream)
	m.Rate = rate
	return m, err
}

// stream sends TCP from a to b for d and returns the rate b received at,
// from its first byte to the end of the stream.
func (l *Lab) stream(ctx context.Context, a, b Host, d time.Duration) (Rate, error) {
	var ln net.Listener
	if err := l.In(b.NS, func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(b.Addr, "0"))
		return err
	}); err != nil {
		return 0, fmt.Errorf("netlab: stream: listen on host %d: %w", b.Index, err)
	}
	defer ln.Close()
	type got struct {
		n    int64
		took time.Duration
		err  error
	}
	done := make(chan got, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- got{err: err}
			return
		}
		defer c.Close()
		buf := make([]byte, 1<<16)
		var n int64
		var first time.Time
		for {
			k, err := c.Read(buf)
			if k > 0 && first.IsZero() {
				first = time.Now()
			}
			n += int64(k)
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				done <- got{n: n, took: time.Since(first), err: err}
				return
			}
		}
	}()
	var c net.Conn
	if err := l.In(a.NS, func() (err error) {
		c, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", ln.Addr().String())
		return err
	}); err != nil {
		return 0, fmt.Errorf("netlab: stream: dial from host %d: %w", a.Index, err)
	}
	chunk := make([]byte, 1<<16)
	end := time.Now().Add(d)
	c.SetWriteDeadline(end.Add(5 * time.Second))
	for time.Now().Before(end) && ctx.Err() == nil {
		if _, err := c.Write(chunk); err != nil {
			c.Close()
			return 0, fmt.Errorf("netlab: stream: %w", err)
		}
	}
	c.Close()
	select {
	case g := <-done:
		if g.err != nil || g.took <= 0 {
			return 0, fmt.Errorf("netlab: stream: %d bytes in %v: %v", g.n, g.took, g.err)
		}
		return Rate(float64(g.n) * 8 / g.took.Seconds()), nil
	case <-time.After(d + 30*time.Second):
		return 0, errors.New("netlab: stream: the receiver did not finish")
	}
}

// Paths measures the paths a mesh on the lab uses, one line each: within
// a site (host 0 to host 1, when a site has two) and between sites (host 0
// to the first host of site 1), each with a TCP stream of d.
func (l *Lab) Paths(ctx context.Context, d time.Duration) ([]string, error) {
	var out []string
	if l.spec.Hosts > 1 {
		m, err := l.Probe(ctx, 0, 1, 10, d)
		if err != nil {
			return out, err
		}
		out = append(out, "within a site (host 0 → 1): "+m.String())
	}
	if l.spec.Sites > 1 {
		m, err := l.Probe(ctx, 0, l.spec.Hosts, 10, d)
		if err != nil {
			return out, err
		}
		out = append(out, fmt.Sprintf("between sites (host 0 → %d): %v", l.spec.Hosts, m))
	}
	return out, nil
}
