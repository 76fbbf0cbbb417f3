package node

import (
	"context"
	"net"
	"slices"
	"strconv"
)

// resolveSeeds turns --join entries into gossip addresses. A host name is
// resolved to every address it names (a Kubernetes headless Service names
// each of its pods), and this node's own addresses are dropped, so every
// pod of a StatefulSet can be started with the same --join. A name that
// does not resolve (yet: a pod's DNS record appears after it starts) is
// kept as given, for memberlist's join to retry. onlySelf is true when
// every seed resolved to this node alone: it is the first of the mesh.
func resolveSeeds(ctx context.Context, seeds []string, isSelf func(ip net.IP, port string) bool,
	lookup func(ctx context.Context, host string) ([]string, error)) (out []string, onlySelf bool) {
	onlySelf = len(seeds) > 0
	for _, s := range seeds {
		host, port, err := net.SplitHostPort(s)
		if err != nil {
			out, onlySelf = append(out, s), false
			continue
		}
		addrs := []string{host}
		if net.ParseIP(host) == nil {
			if addrs, err = lookup(ctx, host); err != nil || len(addrs) == 0 {
				out, onlySelf = append(out, s), false
				continue
			}
		}
		for _, a := range addrs {
			if ip := net.ParseIP(a); ip != nil && isSelf(ip, port) {
				continue
			}
			if hp := net.JoinHostPort(a, port); !slices.Contains(out, hp) {
				out, onlySelf = append(out, hp), false
			}
		}
	}
	return out, onlySelf
}

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
