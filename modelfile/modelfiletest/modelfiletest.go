// Package modelfiletest checks model files with an independent reader: a
// short Python script (modelfile/testdata/read_safetensors.py) that uses
// only the standard library and numpy (Debian's python3-numpy) to parse the
// safetensors header and buffer.
package modelfiletest

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"dsspmesh/cudaops"
)

// Python returns a python3 that imports numpy. Without one the test is
// skipped, except in CI (CI=true), where .ci/run installs python3-numpy
// and its absence fails the test.
func Python(t testing.TB) string {
	t.Helper()
	for _, p := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(p, "-c", "import numpy").Run() == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no python3 with numpy; CI must have it (.ci/run installs python3-numpy)")
	}
	t.Skip("skipped: no python3 with numpy (apt-get install python3-numpy) to read the file independently")
	return ""
}

// CheckWithNumpy runs the Python reader on the file at path and fails t
// unless it finds exactly layout's tensors, F32, with their shapes and the
// bytes of theta, and every metadata key of meta with its value.
func CheckWithNumpy(t testing.TB, path string, layout cudaops.Layout, theta []float32, meta map[string]string) {
	t.Helper()
	py := Python(t)
	type tensor struct {
		DType  string    `json:"dtype"`
		Shape  []int     `json:"shape"`
		SHA256 string    `json:"sha256"`
		First  []float64 `json:"first"`
		Sum    float64   `json:"sum"`
	}
	want := struct {
		Metadata map[string]string `json:"metadata"`
		Tensors  map[string]tensor `json:"tensors"`
	}{Metadata: meta, Tensors: map[string]tensor{}}
	for _, r := range layout {
		v := theta[r.Offset:r.End()]
		b := make([]byte, 4*len(v))
		var sum float64
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
			sum += float64(x)
		}
		h := sha256.Sum256(b)
		tt := tensor{DType: "F32", Shape: r.Shape, SHA256: hex.EncodeToString(h[:]), Sum: sum}
		for _, x := range v[:min(4, len(v))] {
			tt.First = append(tt.First, float64(x))
		}
		want.Tensors[r.Name] = tt
	}
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	expect := filepath.Join(t.TempDir(), "expect.json")
	if err := os.WriteFile(expect, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(py, script(), path, expect).CombinedOutput()
	if err != nil {
		t.Fatalf("numpy reader on %s: %v\n%s", path, err, out)
	}
	t.Logf("numpy reader (%s):\n%s", py, out)
}

func script() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(filepath.Dir(file)), "testdata", "read_safetensors.py")
}
