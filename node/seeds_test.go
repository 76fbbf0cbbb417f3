package node

import (
	"context"
	"errors"
	"net"
	"slices"
	"testing"

	"dsspmesh/node/join"
)

func TestResolveSeedsResolvesNamesAndSkipsThisNode(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Host, cfg.GossipPort = "10.0.0.2", 7946
	dns := map[string][]string{"dssp.default.svc": {"10.0.0.1", "10.0.0.2", "10.0.0.3"}, "dssp-0.dssp": {"10.0.0.2"}}
	lookup := func(_ context.Context, host string) ([]string, error) {
		if a, ok := dns[host]; ok {
			return a, nil
		}
		return nil, errors.New("no such host")
	}
	ctx := context.Background()
	got, onlySelf := join.Resolve(ctx, []string{"dssp.default.svc:7946", "10.0.0.1:7946", "dssp-9.dssp:7946"}, cfg.isSelf, lookup)
	if want := []string{"10.0.0.1:7946", "10.0.0.3:7946", "dssp-9.dssp:7946"}; !slices.Equal(got, want) || onlySelf {
		t.Errorf("seeds %v (only self %v), want %v: this node dropped, duplicates folded, an unresolved name kept for memberlist to retry", got, onlySelf, want)
	}
	if got, onlySelf := join.Resolve(ctx, []string{"dssp-0.dssp:7946"}, cfg.isSelf, lookup); len(got) != 0 || !onlySelf {
		t.Errorf("a name for this node alone: seeds %v, only self %v", got, onlySelf)
	}
	if got, _ := join.Resolve(ctx, []string{"dssp-0.dssp:7000"}, cfg.isSelf, lookup); !slices.Equal(got, []string{"10.0.0.2:7000"}) {
		t.Errorf("this host on another port is another node: %v", got)
	}
	if _, onlySelf := join.Resolve(ctx, nil, cfg.isSelf, lookup); onlySelf {
		t.Error("no --join is not 'only self'")
	}
}

// TestResolveSeedsLocalhost resolves localhost with the system resolver.
func TestResolveSeedsLocalhost(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Host, cfg.GossipPort = "127.0.0.1", 7000
	got, onlySelf := join.Resolve(context.Background(), []string{"localhost:7946"}, cfg.isSelf, net.DefaultResolver.LookupHost)
	if onlySelf || !slices.Contains(got, "127.0.0.1:7946") {
		t.Fatalf("localhost:7946 resolved to %v", got)
	}
	if got, onlySelf := join.Resolve(context.Background(), []string{"localhost:7000"}, cfg.isSelf, net.DefaultResolver.LookupHost); len(got) != 0 || !onlySelf {
		t.Fatalf("localhost on this node's own port: %v (only self %v)", got, onlySelf)
	}
}
