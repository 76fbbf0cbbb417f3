package assemble

import (
	"net"
	"strconv"
	"strings"
	"testing"

	"dsspmesh/internal/testlogger"
	"dsspmesh/node"
)

// A port in use is an error naming the flag that sets it, and whatever
// Node had opened before is closed again: the data dir is free for the
// next try.
func TestNodeNamesTheFlagOfAPortInUseAndClosesWhatItOpened(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	for flag, set := range map[string]func(*node.Config){
		"--http-addr":   func(c *node.Config) { c.HTTPAddr = taken.Addr().String() },
		"--gossip-port": func(c *node.Config) { c.GossipPort = port },
	} {
		t.Run(flag, func(t *testing.T) {
			cfg := node.DefaultConfig()
			cfg.DataDir, cfg.Insecure = t.TempDir(), true
			cfg.HTTPAddr, cfg.GossipPort, cfg.QUICPort = "127.0.0.1:0", 0, 0
			set(&cfg)
			_, err := Node(cfg, testlogger.New(t, 0))
			if err == nil || !strings.HasPrefix(err.Error(), flag+" 127.0.0.1:"+strconv.Itoa(port)+": ") {
				t.Fatalf("err = %v, want it to name %s 127.0.0.1:%d", err, flag, port)
			}
			dir, err := node.OpenDataDir(cfg.DataDir)
			if err != nil {
				t.Fatalf("data dir still held after the failed start: %v", err)
			}
			dir.Close()
		})
	}
}
