package datadir

import (
	"crypto/ed25519"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"dsspmesh/mesh"
)

// A fresh data dir makes the node's key pair (node.key, mode 0600) and
// derives its id from it; a reopen keeps both.
func TestFreshDataDirDerivesItsIDFromItsKey(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	pub := d.NodeKey.Public().(ed25519.PublicKey)
	if d.ID != mesh.DeriveID(pub) || !d.ID.SelfCertifying() {
		t.Fatalf("id %q, derived %q", d.ID, mesh.DeriveID(pub))
	}
	st, err := os.Stat(filepath.Join(dir, nodeKey))
	if err != nil || st.Mode().Perm() != 0o600 || st.Size() != ed25519.SeedSize {
		t.Fatalf("node.key: %v %v", st, err)
	}
	id := d.ID
	d.Close()
	d, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.ID != id || !d.NodeKey.Public().(ed25519.PublicKey).Equal(pub) {
		t.Fatalf("reopen: id %q key changed", d.ID)
	}
}

// A data dir of an earlier build holds node-id (node-xxxxxxxx) and no key:
// it keeps its id and gets a key, the one it then presents for life.
func TestLegacyDataDirKeepsItsIDAndGetsAKey(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, idFile), []byte("node-0a1b2c3d\n"), 0o600)
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if d.ID != "node-0a1b2c3d" || d.ID.SelfCertifying() || len(d.NodeKey) != ed25519.PrivateKeySize {
		t.Fatalf("legacy dir: id %q, key %d bytes", d.ID, len(d.NodeKey))
	}
	key := d.NodeKey
	d.Close()
	d, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.ID != "node-0a1b2c3d" || !d.NodeKey.Equal(key) {
		t.Fatal("legacy dir changed its id or key on reopen")
	}
}

func TestNodeKeyRefusals(t *testing.T) {
	open := func(t *testing.T, setup func(dir string)) error {
		dir := t.TempDir()
		d, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		d.Close()
		setup(dir)
		d, err = Open(dir)
		if err == nil {
			d.Close()
		}
		return err
	}
	cases := map[string]struct {
		setup func(dir string)
		want  string
	}{
		"readable by others": {func(dir string) { os.Chmod(filepath.Join(dir, nodeKey), 0o644) }, "group and others must have no access"},
		"truncated":          {func(dir string) { os.WriteFile(filepath.Join(dir, nodeKey), []byte("short"), 0o600) }, "is 5 bytes"},
		"replaced": {func(dir string) {
			k, _ := mesh.GenerateNodeKey()
			os.WriteFile(filepath.Join(dir, nodeKey), k.Seed(), 0o600)
		}, "the key this id was made from is gone"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			err := open(t, c.setup)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "data dir ") {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
}

func TestIdentitiesPersist(t *testing.T) {
	d, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if ids, err := d.Identities(); err != nil || len(ids.Revoked)+len(ids.Pins) != 0 {
		t.Fatalf("fresh: %+v %v", ids, err)
	}
	k, _ := mesh.GenerateNodeKey()
	want := Identities{Revoked: []mesh.NodeID{"node-0a1b2c3d"}, Pins: map[mesh.NodeID]ed25519.PublicKey{"node-11111111": k.Public().(ed25519.PublicKey)}}
	if err := d.SetIdentities(want); err != nil {
		t.Fatal(err)
	}
	got, err := d.Identities()
	if err != nil || len(got.Revoked) != 1 || got.Revoked[0] != "node-0a1b2c3d" || !got.Pins["node-11111111"].Equal(want.Pins["node-11111111"]) {
		t.Fatalf("got %+v %v", got, err)
	}
	os.WriteFile(filepath.Join(d.Path, idsFile), []byte(`{"pins":{"x":"AAAA"}}`), 0o600)
	if _, err := d.Identities(); err == nil || !strings.Contains(err.Error(), idsFile) {
		t.Fatalf("damaged identities: %v", err)
	}
}
