package node

import (
	"net"
	"strconv"
)

// isSelf reports whether ip:port is this node's gossip address: its --host
// (every interface address when that is 0.0.0.0 or ::, every loopback
// address when it is a loopback one) or its --advertise-gossip.
func (c Config) isSelf(ip net.IP, port string) bool {
	if port == strconv.Itoa(c.GossipPort) {
		host := net.ParseIP(c.Host)
		switch {
		case host == nil:
		case host.Equal(ip), host.IsLoopback() && ip.IsLoopback():
			return true
		case host.IsUnspecified():
			addrs, _ := net.InterfaceAddrs()
			for _, a := range addrs {
				if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
					return true
				}
			}
		}
	}
	if h, p, err := net.SplitHostPort(c.AdvertiseGossip); err == nil && p == port {
		return net.ParseIP(h).Equal(ip)
	}
	return false
}
