package test

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// FaultNet is the network the fault tests put between nodes: every node
// advertises proxy addresses (--advertise-gossip, --advertise-quic), so all
// peer traffic to node i enters through node i's proxies on loopback, which
// forward it to the ports node i binds. A proxy knows which node sent a UDP
// datagram by its source port (QUIC and memberlist send from the socket they
// bind), so it can cut, drop, delay or duplicate traffic per pair of nodes.
//
// Memberlist also uses TCP (push-pull sync, the fallback probe, joins). A
// TCP connection's source port is ephemeral and names no node, so TCP is
// cut coarsely: while a partition separates node i from anyone, TCP into
// i's gossip proxy is refused. Without that, the fallback probe would keep a
// partitioned node alive in everyone's view. Loss, delay and duplication
// apply to UDP only (QUIC's own streams, and memberlist's probes).
type FaultNet struct {
	mu      sync.Mutex
	group   map[int]int   // node → partition group; empty: healed
	owner   map[int]int   // bound UDP port → node
	loss    float64       // probability a datagram is dropped
	dup     float64       // probability a datagram is sent twice
	delay   time.Duration // added to every datagram
	jitter  time.Duration // uniform extra delay in [0, jitter)
	rng     *rand.Rand    // guarded by mu
	proxies []*udpProxy
	tcp     []*tcpProxy
	Dropped uint64 // datagrams dropped by a partition or by loss
}

// NewFaultNet returns a healed, lossless network.
func NewFaultNet(seed uint64) *FaultNet {
	return &FaultNet{group: map[int]int{}, owner: map[int]int{}, rng: rand.New(rand.NewPCG(seed, 7))}
}

// Own declares that UDP datagrams from port come from node.
func (n *FaultNet) Own(port, node int) {
	n.mu.Lock()
	n.owner[port] = node
	n.mu.Unlock()
}

// Partition cuts the nodes into groups: traffic flows only inside a group.
// A node in no group is cut from everyone.
func (n *FaultNet) Partition(groups ...[]int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.group = map[int]int{-1: -1} // non-empty: a partition is on
	for g, nodes := range groups {
		for _, i := range nodes {
			n.group[i] = g
		}
	}
}

// Heal removes the partition (loss, delay and duplication stay).
func (n *FaultNet) Heal() {
	n.mu.Lock()
	n.group = map[int]int{}
	n.mu.Unlock()
}

// Lossy sets per-datagram loss and duplication probabilities and a delay of
// delay plus up to jitter. Zero values restore a perfect network.
func (n *FaultNet) Lossy(loss, dup float64, delay, jitter time.Duration) {
	n.mu.Lock()
	n.loss, n.dup, n.delay, n.jitter = loss, dup, delay, jitter
	n.mu.Unlock()
}

func (n *FaultNet) cutLocked(a, b int) bool {
	if len(n.group) == 0 || a < 0 || b < 0 {
		return false
	}
	ga, oka := n.group[a]
	gb, okb := n.group[b]
	return !oka || !okb || ga != gb
}

// isolated reports whether a partition separates node from anyone.
func (n *FaultNet) isolated(node int) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.group) == 0 {
		return false
	}
	for other := range n.owner {
		if o := n.owner[other]; o != node && n.cutLocked(node, o) {
			return true
		}
	}
	return false
}

// fate decides what happens to one datagram between nodes a and b: how many
// copies to send (0, 1 or 2) and after what delay.
func (n *FaultNet) fate(a, b int) (copies int, after time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cutLocked(a, b) || (n.loss > 0 && n.rng.Float64() < n.loss) {
		n.Dropped++
		return 0, 0
	}
	copies = 1
	if n.dup > 0 && n.rng.Float64() < n.dup {
		copies = 2
	}
	after = n.delay
	if n.jitter > 0 {
		after += time.Duration(n.rng.Int64N(int64(n.jitter)))
	}
	return copies, after
}

func (n *FaultNet) nodeOf(addr *net.UDPAddr) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if i, ok := n.owner[addr.Port]; ok {
		return i
	}
	return -1
}

// Close stops every proxy.
func (n *FaultNet) Close() {
	for _, p := range n.proxies {
		p.close()
	}
	for _, p := range n.tcp {
		p.close()
	}
}

// udpProxy listens on one address and forwards to target (node's bound
// port). Each source gets its own upstream socket, so the node's replies
// come back to that socket and are sent on to the source from the listen
// address, the one the source dialled.
type udpProxy struct {
	net    *FaultNet
	node   int
	target *net.UDPAddr
	ln     *net.UDPConn

	mu  sync.Mutex
	ups map[string]*net.UDPConn
}

// ProxyUDP starts a proxy in front of node's UDP port target and returns
// its address.
func (n *FaultNet) ProxyUDP(node int, target string) (string, error) {
	ta, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		return "", err
	}
	ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return "", fmt.Errorf("proxy for node%d: %w", node, err)
	}
	ln.SetReadBuffer(4 << 20)
	p := &udpProxy{net: n, node: node, target: ta, ln: ln, ups: map[string]*net.UDPConn{}}
	n.proxies = append(n.proxies, p)
	go p.inbound()
	return ln.LocalAddr().String(), nil
}

func (p *udpProxy) inbound() {
	buf := make([]byte, 64<<10)
	for {
		k, src, err := p.ln.ReadFromUDP(buf)
		if err != nil {
			return
		}
		from := p.net.nodeOf(src)
		up, err := p.upstream(src, from)
		if err != nil {
			continue
		}
		p.send(from, buf[:k], func(b []byte) { up.Write(b) })
	}
}

// send forwards one datagram between the proxy's node and peer from.
func (p *udpProxy) send(from int, b []byte, write func([]byte)) {
	copies, after := p.net.fate(from, p.node)
	if copies == 0 {
		return
	}
	if after == 0 {
		for range copies {
			write(b)
		}
		return
	}
	c := append([]byte(nil), b...)
	time.AfterFunc(after, func() {
		for range copies {
			write(c)
		}
	})
}

func (p *udpProxy) upstream(src *net.UDPAddr, from int) (*net.UDPConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if up, ok := p.ups[src.String()]; ok {
		return up, nil
	}
	up, err := net.DialUDP("udp", nil, p.target)
	if err != nil {
		return nil, err
	}
	up.SetReadBuffer(4 << 20)
	p.ups[src.String()] = up
	back := *src
	go func() {
		buf := make([]byte, 64<<10)
		for {
			k, err := up.Read(buf)
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				continue // ECONNREFUSED while the node is down
			}
			p.send(from, buf[:k], func(b []byte) { p.ln.WriteToUDP(b, &back) })
		}
	}()
	return up, nil
}

func (p *udpProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, up := range p.ups {
		up.Close()
	}
}

// tcpProxy forwards TCP connections to target unless a partition isolates
// its node (see FaultNet).
type tcpProxy struct {
	net    *FaultNet
	node   int
	target string
	ln     net.Listener

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// ProxyTCP starts a TCP proxy for node on addr (the port of its UDP gossip
// proxy, so one advertised host:port serves both) toward target.
func (n *FaultNet) ProxyTCP(node int, addr, target string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("tcp proxy for node%d: %w", node, err)
	}
	p := &tcpProxy{net: n, node: node, target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	n.tcp = append(n.tcp, p)
	go p.accept()
	return nil
}

func (p *tcpProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.net.isolated(p.node) {
			c.Close()
			continue
		}
		go p.pipe(c)
	}
}

func (p *tcpProxy) pipe(c net.Conn) {
	up, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, c); done <- struct{}{} }()
	go func() { io.Copy(c, up); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

func (p *tcpProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}
