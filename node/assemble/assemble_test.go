package assemble

import (
	"bytes"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"dsspmesh/internal/testlogger"
	"dsspmesh/mesh"
	"dsspmesh/node"
	"dsspmesh/node/datadir"
	"dsspmesh/raftstore"

	"github.com/hashicorp/raft"
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
			dir, err := datadir.Open(cfg.DataDir)
			if err != nil {
				t.Fatalf("data dir still held after the failed start: %v", err)
			}
			dir.Close()
		})
	}
}

// A data dir records its mesh key's fingerprint (never the key) once a
// start succeeds; a later start with another key is refused at once, the
// error naming the data dir and the remedy, and the right key still opens
// it. A data dir without the record (fresh, or from an older build) passes.
func TestNodeRefusesADataDirOfAnotherMeshKey(t *testing.T) {
	keys := t.TempDir()
	keyA, keyB := filepath.Join(keys, "a.key"), filepath.Join(keys, "b.key")
	for _, k := range []string{keyA, keyB} {
		if err := mesh.WriteKeyFile(k); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	start := func(key string) (node.Deps, error) {
		cfg := node.DefaultConfig()
		cfg.DataDir, cfg.KeyFile = dir, key
		cfg.HTTPAddr, cfg.GossipPort, cfg.QUICPort = "127.0.0.1:0", 0, 0
		return Node(cfg, testlogger.New(t, 0))
	}
	closeDeps := func(d node.Deps) {
		d.Membership.Shutdown()
		d.Transport.Close()
		d.HTTP.Close()
		d.Dir.Close()
	}
	d, err := start(keyA)
	if err != nil {
		t.Fatalf("fresh data dir: %v", err)
	}
	if wrote, err := d.Dir.RecordKey(); !wrote || err != nil { // what node.Run does once the start succeeds
		t.Fatalf("record the key: %v %v", wrote, err)
	}
	closeDeps(d)
	raw, _ := os.ReadFile(keyA)
	rec, _ := os.ReadFile(filepath.Join(dir, "mesh-key.fingerprint"))
	if len(rec) == 0 || strings.Contains(string(rec), string(raw)) {
		t.Fatalf("fingerprint file %q: want a record that is not the key", rec)
	}

	_, err = start(keyB)
	if err == nil || !strings.Contains(err.Error(), "data dir "+dir+" was used with another mesh key") || !strings.Contains(err.Error(), "fresh --data-dir") {
		t.Fatalf("start with another key: %v, want an error naming the data dir and the remedy", err)
	}
	d, err = start(keyA)
	if err != nil {
		t.Fatalf("start with the data dir's key after a refusal: %v", err)
	}
	closeDeps(d)
}

// One damaged shard store refuses the node's whole start, before any port
// is bound: the error names the file, the problem and the remedy, the
// sound shards are not started in the meantime, the damaged file is left
// as it was, and the data dir is free again. Once the shard folder is
// removed (the remedy), the node starts.
func TestNodeRefusesToStartOnADamagedShardStore(t *testing.T) {
	dataDir := t.TempDir()
	for _, id := range []uint32{0, 1, 2} {
		s, err := raftstore.Open(dataDir, id, raftstore.DefaultConfig(), testlogger.New(t, 0))
		if err != nil {
			t.Fatal(err)
		}
		var logs []*raft.Log
		for i := uint64(1); i <= 64; i++ {
			logs = append(logs, &raft.Log{Index: i, Term: 3, Type: raft.LogCommand, Data: make([]byte, 4<<10)})
		}
		if err := s.Log.StoreLogs(logs); err != nil {
			t.Fatal(err)
		}
		if err := s.Stable.SetUint64([]byte("CurrentTerm"), 3); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	for _, c := range []struct {
		name   string
		damage func(path string) error
	}{
		{"truncated", func(path string) error {
			fi, err := os.Stat(path)
			if err != nil {
				return err
			}
			return os.Truncate(path, fi.Size()/2)
		}},
		{"zero bytes", func(path string) error { return os.Truncate(path, 0) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(raftstore.ShardDir(dataDir, 1), "raft.db")
			if err := c.damage(path); err != nil {
				t.Fatal(err)
			}
			before, _ := os.ReadFile(path)
			cfg := node.DefaultConfig()
			cfg.DataDir, cfg.Insecure = dataDir, true
			cfg.HTTPAddr, cfg.GossipPort, cfg.QUICPort = "127.0.0.1:0", 0, 0
			_, err := Node(cfg, testlogger.New(t, 0))
			var de *raftstore.DamagedError
			if !errors.As(err, &de) || de.Shard != 1 {
				t.Fatalf("start on a damaged shard 1: %v, want a *raftstore.DamagedError of shard 1", err)
			}
			for _, want := range []string{"--data-dir " + dataDir + ": the node does not start: ", path + " is ", "remove " + raftstore.ShardDir(dataDir, 1) + " to have this node rejoin the shard as a fresh replica"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("err = %v, want it to say %q", err, want)
				}
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
				t.Error("the refused start changed the damaged file")
			}
			dir, err := datadir.Open(dataDir)
			if err != nil {
				t.Fatalf("data dir still held after the refused start: %v", err)
			}
			dir.Close()
		})
	}
	if err := os.RemoveAll(raftstore.ShardDir(dataDir, 1)); err != nil {
		t.Fatal(err)
	}
	cfg := node.DefaultConfig()
	cfg.DataDir, cfg.Insecure = dataDir, true
	cfg.HTTPAddr, cfg.GossipPort, cfg.QUICPort = "127.0.0.1:0", 0, 0
	d, err := Node(cfg, testlogger.New(t, 0))
	if err != nil {
		t.Fatalf("start after removing the damaged shard folder: %v", err)
	}
	d.Membership.Shutdown()
	d.Transport.Close()
	d.HTTP.Close()
	d.Dir.Close()
}
