package mesh

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestKeyFileRoundTripAndRefusals(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "mesh.key")
	if err := WriteKeyFile(path); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 || st.Size() != KeySize {
		t.Fatalf("mode %v size %d", st.Mode(), st.Size())
	}
	if _, err := LoadKeyFile(path); err != nil {
		t.Fatal(err)
	}
	if err := WriteKeyFile(path); err == nil || !strings.Contains(err.Error(), "refusing to overwrite") {
		t.Fatalf("overwrite: %v", err)
	}

	os.Chmod(path, 0o640)
	if _, err := LoadKeyFile(path); !errors.Is(err, ErrBadKey) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "0640") {
		t.Fatalf("group-readable: %v", err)
	}
	short := filepath.Join(dir, "short.key")
	os.WriteFile(short, []byte("abc"), 0o600)
	if _, err := LoadKeyFile(short); !errors.Is(err, ErrBadKey) || !strings.Contains(err.Error(), "3 bytes") {
		t.Fatalf("short: %v", err)
	}
	if _, err := LoadKeyFile(filepath.Join(dir, "missing")); !errors.Is(err, ErrBadKey) {
		t.Fatalf("missing: %v", err)
	}
}

func TestSecurityIsDeterministic(t *testing.T) {
	k := mustKey(t)
	a, b := mustSecurity(t, k), mustSecurity(t, k)
	if !bytes.Equal(a.CACertificate(), b.CACertificate()) || !bytes.Equal(a.GossipKey(), b.GossipKey()) {
		t.Fatal("same key derived different CA or gossip key")
	}
	if bytes.Equal(a.GossipKey(), k[:]) || len(a.GossipKey()) != 32 {
		t.Fatal("gossip key is not derived")
	}
	c := mustSecurity(t, mustKey(t))
	if bytes.Equal(a.CACertificate(), c.CACertificate()) {
		t.Fatal("different keys derived the same CA")
	}
}
