package launch

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// fakeNodeEnv makes the test binary, started by a Mesh, act as a dssp node
// that only binds its ports and serves /status: the launcher's handling of
// taken ports without a real node.
const fakeNodeEnv = "DSSP_LAUNCH_FAKE_NODE"

func TestMain(m *testing.M) {
	if os.Getenv(fakeNodeEnv) == "1" {
		fakeNode(os.Args[1:])
		return
	}
	os.Exit(m.Run())
}

// fakeNode binds --gossip-port (TCP and UDP), --quic-port (UDP) and
// --http-addr as a node does, failing with the node's message when one is
// taken, then serves /status until killed.
func fakeNode(args []string) {
	arg := func(flag string) string {
		if i := slices.Index(args, flag); i >= 0 && i+1 < len(args) {
			return args[i+1]
		}
		return ""
	}
	fail := func(flag, addr string, err error) {
		fmt.Fprintf(os.Stderr, "dssp: %s %s: %v\n", flag, addr, err)
		os.Exit(1)
	}
	httpAddr := arg("--http-addr")
	hl, err := net.Listen("tcp", httpAddr)
	if err != nil {
		fail("--http-addr", httpAddr, err)
	}
	quic := net.JoinHostPort("127.0.0.1", arg("--quic-port"))
	if _, err := net.ListenPacket("udp", quic); err != nil {
		fail("--quic-port", quic, err)
	}
	gossip := net.JoinHostPort("127.0.0.1", arg("--gossip-port"))
	if _, err := net.Listen("tcp", gossip); err != nil {
		fail("--gossip-port", gossip, err)
	}
	if _, err := net.ListenPacket("udp", gossip); err != nil {
		fail("--gossip-port", gossip, err)
	}
	http.Serve(hl, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"node":"fake","gossip":%q}`, gossip)
	}))
}

func TestNewMeshGivesEveryPortOnce(t *testing.T) {
	// 40 nodes, 120 ports: drawn per node (three at a time, each draw
	// forgetting the others), two nodes shared a port about half the time.
	m, err := NewMesh("dssp", t.TempDir(), 40, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]int{}
	for _, p := range m.Procs {
		ports := p.ports()
		if len(ports) != 3 {
			t.Fatalf("node %d: ports %v from %s %s %s", p.Index, ports, p.Gossip, p.QUIC, p.HTTP)
		}
		for _, port := range ports {
			if j, ok := seen[port]; ok {
				t.Fatalf("port %d given to node %d and node %d", port, j, p.Index)
			}
			seen[port] = p.Index
		}
		if !slices.Contains(p.args, p.HTTP) {
			t.Fatalf("node %d: --http-addr %s not on its command line %v", p.Index, p.HTTP, p.args)
		}
	}
}

// hold takes addr's port the way another program would: TCP, and UDP
// where it is free.
func hold(t *testing.T, addr string) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if u, err := net.ListenPacket("udp", addr); err == nil {
		t.Cleanup(func() { u.Close() })
	}
}

func TestWaitUpRestartsANodeWhosePortWasTakenOnFreshPorts(t *testing.T) {
	t.Setenv(fakeNodeEnv, "1")
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMesh(bin, t.TempDir(), 2, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Stop(5 * time.Second) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Another program takes the bootstrap node's gossip port between
	// NewMesh and the node's bind.
	oldGossip := m.Procs[0].Gossip
	hold(t, oldGossip)
	if err := m.Start(0); err != nil {
		t.Fatal(err)
	}
	if err := m.WaitUp(ctx, []int{0}, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if m.Rebinds(0) != 1 || m.Procs[0].Gossip == oldGossip {
		t.Fatalf("node 0: %d rebinds, gossip %s (taken: %s)", m.Rebinds(0), m.Procs[0].Gossip, oldGossip)
	}
	if j := slices.Index(m.Procs[1].args, "--join"); j < 0 || m.Procs[1].args[j+1] != m.Procs[0].Gossip {
		t.Fatalf("node 1 joins through %v, node 0 now gossips on %s", m.Procs[1].args, m.Procs[0].Gossip)
	}
	if log := LogTail(m.Procs[0].LogPath, 5); !strings.Contains(log, bindFailure) {
		t.Fatalf("node 0's log keeps the failed start: %q", log)
	}

	// Node 1 ran; killed and restarted with its HTTP port taken, it is
	// not moved: the mesh knows it at its gossip address.
	if err := m.Start(1); err != nil {
		t.Fatal(err)
	}
	if err := m.WaitUp(ctx, []int{1}, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := m.Kill(1); err != nil {
		t.Fatal(err)
	}
	taken := m.Procs[1].HTTP
	hold(t, taken)
	if err := m.Start(1); err != nil {
		t.Fatal(err)
	}
	err = m.WaitUp(ctx, []int{1}, 20*time.Second)
	if err == nil || !strings.Contains(err.Error(), bindFailure) || m.Procs[1].HTTP != taken || m.Rebinds(1) != 0 {
		t.Fatalf("restart on a taken port: err %v, http %s (was %s), %d rebinds", err, m.Procs[1].HTTP, taken, m.Rebinds(1))
	}
}
