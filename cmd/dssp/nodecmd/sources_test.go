package nodecmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"dsspmesh/node"
)

func TestLoadSourcesPrecedence(t *testing.T) {
	file := filepath.Join(t.TempDir(), "node.json")
	os.WriteFile(file, []byte(`{"model": "lenet", "gossip-port": 9000, "quic-port": 9001, "join": ["10.0.0.1:7946", "10.0.0.2:7946"], "insecure": true}`), 0o600)
	c := node.DefaultConfig()
	fs := pflag.NewFlagSet("node", pflag.ContinueOnError)
	c.BindFlags(fs)
	if err := fs.Parse([]string{"--gossip-port", "8000"}); err != nil {
		t.Fatal(err)
	}
	env := []string{"DSSP_QUIC_PORT=8001", "DSSP_PARADIGM=ssp", "PATH=/bin"}
	if err := LoadSources(fs, file, env); err != nil {
		t.Fatal(err)
	}
	if c.GossipPort != 8000 || c.QUICPort != 8001 || c.Spec.Model != "lenet" || c.Spec.Paradigm != "ssp" || !c.Insecure {
		t.Fatalf("flag > env > file violated: %+v", c)
	}
	if len(c.Join) != 2 || c.Join[1] != "10.0.0.2:7946" {
		t.Fatalf("join from file: %v", c.Join)
	}
	for _, name := range []string{"model", "paradigm", "gossip-port"} {
		if !fs.Changed(name) {
			t.Errorf("%s set from a source should count as explicit", name)
		}
	}
	if fs.Changed("shards") {
		t.Error("shards was never set")
	}
}

func TestLoadSourcesRejectsUnknownKeysAndBadValues(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ body, want string }{
		{`{"modle": "mlp"}`, "unknown keys modle"},
		{`{"gossip-port": "high"}`, `"gossip-port"`},
		{`[1,2]`, "not a JSON object"},
	} {
		file := filepath.Join(dir, "c.json")
		os.WriteFile(file, []byte(tc.body), 0o600)
		c := node.DefaultConfig()
		fs := pflag.NewFlagSet("node", pflag.ContinueOnError)
		c.BindFlags(fs)
		err := LoadSources(fs, file, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: want %q, got %v", tc.body, tc.want, err)
		}
	}
	c := node.DefaultConfig()
	fs := pflag.NewFlagSet("node", pflag.ContinueOnError)
	c.BindFlags(fs)
	if err := LoadSources(fs, "", []string{"DSSP_SHARDS=many"}); err == nil || !strings.Contains(err.Error(), "DSSP_SHARDS") {
		t.Errorf("bad env value: %v", err)
	}
}
