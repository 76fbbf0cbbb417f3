package datadir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"dsspmesh/mesh"
	"dsspmesh/node/job"
)

func TestDataDirKeepsIDSpecAndPeers(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	id := d.ID
	if _, ok, err := d.Spec(); ok || err != nil {
		t.Fatalf("fresh dir has a spec: %v %v", ok, err)
	}
	spec := job.DefaultSpec()
	spec.Paradigm = "ssp"
	if err := d.SetSpec(spec); err != nil {
		t.Fatal(err)
	}
	if err := d.SetPeers([]string{"127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "in use by another dssp node") {
		t.Fatalf("second open of a locked dir: %v", err)
	}
	d.Close()
	d2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	got, ok, err := d2.Spec()
	if d2.ID != id || !ok || err != nil || got != spec {
		t.Fatalf("after reopen: id %s (want %s), spec %+v %v %v", d2.ID, id, got, ok, err)
	}
	if p := d2.Peers(); len(p) != 1 || p[0] != "127.0.0.1:1" {
		t.Fatalf("peers: %v", p)
	}
}

func TestDataDirErrorsNameTheFolder(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)
	if _, err := Open(file); err == nil || !strings.Contains(err.Error(), file+" is not a directory") {
		t.Fatalf("file as data dir: %v", err)
	}
	under := filepath.Join(file, "sub")
	if _, err := Open(under); err == nil || !strings.Contains(err.Error(), under) || strings.Count(err.Error(), "\n") > 0 {
		t.Fatalf("data dir under a file: %v", err)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, idFile), []byte("bad id!\n"), 0o600)
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "bad node id") {
		t.Fatalf("corrupt id: %v", err)
	}
}

// The data dir records its mesh key's fingerprint once (RecordKey) and
// refuses another key's (CheckKey); a dir without the record — fresh, or
// written by an older build — passes and gets it; --insecure (no key)
// neither checks nor records.
func TestDataDirRecordsTheMeshKey(t *testing.T) {
	d, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if wrote, err := d.RecordKey(); wrote || err != nil {
		t.Fatalf("--insecure recorded a key: %v %v", wrote, err)
	}
	var a, b mesh.MeshKey
	b[0] = 1
	d.Key = KeyFingerprint(a)
	if d.Key == KeyFingerprint(b) || len(d.Key) != 32 {
		t.Fatalf("fingerprints %s, %s", d.Key, KeyFingerprint(b))
	}
	if err := d.CheckKey(); err != nil {
		t.Fatalf("a dir without a record: %v", err)
	}
	if wrote, err := d.RecordKey(); !wrote || err != nil {
		t.Fatalf("first record: %v %v", wrote, err)
	}
	if wrote, err := d.RecordKey(); wrote || err != nil {
		t.Fatalf("second record of the same key: %v %v", wrote, err)
	}
	if err := d.CheckKey(); err != nil {
		t.Fatalf("the recorded key: %v", err)
	}
	d.Key = KeyFingerprint(b)
	if err := d.CheckKey(); err == nil || !strings.Contains(err.Error(), "data dir "+d.Path+" was used with another mesh key") {
		t.Fatalf("another key: %v", err)
	}
	d.Key = ""
	if err := d.CheckKey(); err != nil {
		t.Fatalf("--insecure on a keyed dir: %v", err)
	}
}
