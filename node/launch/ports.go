package launch

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"dsspmesh/nodeclient"
)

// FreePorts returns n distinct loopback ports that were free for both TCP
// and UDP a moment ago (gossip needs both on one port, QUIC UDP, HTTP
// TCP): every port is held, TCP and UDP, until all n are found, so one
// call never returns a port twice. They are drawn below Linux's default
// ephemeral range (32768–60999): a port the kernel hands out for port 0 can
// be taken again as the local port of any outgoing connection before the
// node binds it, which made busy test runs fail with "address already in
// use". Another program may still take a port between this call and the
// node's bind: [Mesh.WaitUp] restarts such a node on fresh ports.
func FreePorts(n int) ([]int, error) { return freePorts(n, nil) }

// freePorts is FreePorts avoiding the ports in avoid.
func freePorts(n int, avoid []int) ([]int, error) {
	var out []int
	var held []io.Closer
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for tries := 0; len(out) < n && tries < 1000+10*n; tries++ {
		port := freePortLow + rand.IntN(freePortHigh-freePortLow)
		if slices.Contains(avoid, port) {
			continue
		}
		tl, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		ul, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			tl.Close()
			continue
		}
		held = append(held, tl, ul)
		out = append(out, port)
	}
	if len(out) < n {
		return nil, fmt.Errorf("up: could not find %d free loopback ports in [%d, %d)", n, freePortLow, freePortHigh)
	}
	return out, nil
}

const freePortLow, freePortHigh = 20000, 32000

// bindFailure is what a node prints when a port it was given is taken
// (node/assemble's bindError).
const bindFailure = "address already in use"

// setPorts gives p gossip, QUIC and HTTP ports (in that order), in its
// fields and on its command line.
func (p *Proc) setPorts(ports []int) {
	p.Gossip = net.JoinHostPort(p.Host.addr(), strconv.Itoa(ports[0]))
	p.QUIC = net.JoinHostPort(p.Host.addr(), strconv.Itoa(ports[1]))
	p.HTTP = net.JoinHostPort(p.Host.httpHost(), strconv.Itoa(ports[2]))
	p.setArg("--gossip-port", strconv.Itoa(ports[0]))
	p.setArg("--quic-port", strconv.Itoa(ports[1]))
	p.setArg("--http-addr", p.HTTP)
}

// setArg replaces the value of flag on p's command line, or appends it.
func (p *Proc) setArg(flag, value string) {
	if i := slices.Index(p.args, flag); i >= 0 && i+1 < len(p.args) {
		p.args[i+1] = value
		return
	}
	p.args = append(p.args, flag, value)
}

// ports is p's gossip, QUIC and HTTP port.
func (p *Proc) ports() []int {
	var out []int
	for _, a := range []string{p.Gossip, p.QUIC, p.HTTP} {
		if _, port, err := net.SplitHostPort(a); err == nil {
			if n, err := strconv.Atoi(port); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// BindFailed reports whether node i has exited because a port it was given
// was already in use (its log since it last started says so).
func (m *Mesh) BindFailed(i int) bool {
	p := m.Procs[i]
	if p.cmd == nil || p.Alive() {
		return false
	}
	f, err := os.Open(p.LogPath)
	if err != nil {
		return false
	}
	defer f.Close()
	if _, err := f.Seek(p.logOff, io.SeekStart); err != nil {
		return false
	}
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	return err == nil && strings.Contains(string(b), bindFailure)
}

// Rebind gives node i fresh ports after a start that failed because one of
// its ports was taken (see [Mesh.BindFailed]), and names its new gossip
// address in every other node's --join seeds. It refuses a node that ever
// got past binding: the mesh knows such a node by its gossip address, and
// memberlist would reject the same id at another one.
func (m *Mesh) Rebind(i int) error {
	p := m.Procs[i]
	switch {
	case p.Alive():
		return fmt.Errorf("up: node %d is running", i)
	case !m.BindFailed(i):
		return fmt.Errorf("up: node %d did not fail on a port in use", i)
	case p.starts != p.bindFails+1:
		return fmt.Errorf("up: node %d ran before on %s; the mesh knows it there", i, p.Gossip)
	}
	var taken []int
	for _, q := range m.Procs {
		taken = append(taken, q.ports()...)
	}
	ports, err := freePorts(3, taken)
	if err != nil {
		return err
	}
	old := p.Gossip
	p.setPorts(ports)
	p.bindFails++
	for _, q := range m.Procs {
		for k := 0; k+1 < len(q.args); k++ {
			if q.args[k] == "--join" && q.args[k+1] == old {
				q.args[k+1] = p.Gossip
			}
		}
	}
	return nil
}

// maxRebinds bounds the fresh ports WaitUp tries for one node.
const maxRebinds = 3

// WaitUp waits until every node in idx (each already started) answers
// /status. A node that exits because a port it was given was taken
// meanwhile, before it ever ran, is given fresh ports ([Mesh.Rebind]) and
// started again, up to three times; any other exit, or limit passing,
// is an error. It polls every 200 ms.
func (m *Mesh) WaitUp(ctx context.Context, idx []int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	pending := slices.Clone(idx)
	for {
		for _, i := range pending {
			if err := m.Exited(i); err != nil {
				p := m.Procs[i]
				if p.bindFails >= maxRebinds || m.Rebind(i) != nil {
					return err
				}
				m.log.Info("port taken; node restarted on fresh ports", "node", i, "http", p.HTTP, "gossip", p.Gossip)
				if err := m.Start(i); err != nil {
					return err
				}
			}
		}
		// Concurrently: a node that has bound its HTTP port but not yet
		// served it holds a request until the client's timeout.
		up := make([]bool, len(pending))
		var wg sync.WaitGroup
		for k, i := range pending {
			wg.Go(func() {
				_, err := nodeclient.FetchStatus(ctx, m.Procs[i].HTTP)
				up[k] = err == nil
			})
		}
		wg.Wait()
		var still []int
		for k, i := range pending {
			if !up[k] {
				still = append(still, i)
			}
		}
		if pending = still; len(pending) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			p := m.Procs[pending[0]]
			return fmt.Errorf("up: node %d did not answer on http://%s/status within %v; see %s", p.Index, p.HTTP, limit, p.LogPath)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Rebinds is how many times node i was given fresh ports.
func (m *Mesh) Rebinds(i int) int { return m.Procs[i].bindFails }
