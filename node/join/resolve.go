package join

import (
	"context"
	"net"
	"slices"
)

// Resolve turns --join entries into gossip addresses. A host name is
// resolved to every address it names (a Kubernetes headless Service names
// each of its pods), and this node's own addresses are dropped, so every
// pod of a StatefulSet can be started with the same --join. A name that
// does not resolve (yet: a pod's DNS record appears after it starts) is
// kept as given, for memberlist's join to retry. onlySelf is true when
// every seed resolved to this node alone: it is the first of the mesh.
func Resolve(ctx context.Context, seeds []string, isSelf func(ip net.IP, port string) bool,
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
