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
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"dsspmesh/cudaops"
	"dsspmesh/internal/python"
)

// Python returns a python3 that imports numpy. Without one the test is
// skipped, except in CI (CI=true), where .ci/run installs python3-numpy
// and its absence fails the test.
func Python(t testing.TB) string {
	t.Helper()
	return PythonWith(t, "numpy")
}

// PythonWith returns the first interpreter of $DSSP_PYTHON, python3 and
// /usr/bin/python3 that imports every module of modules (numpy, torch).
// Without one the test is skipped naming what is missing, except in CI
// (CI=true), where .ci/run installs python3-numpy and python3-torch and
// their absence fails the test.
func PythonWith(t testing.TB, modules ...string) string {
	t.Helper()
	if p, ok := FindPython(modules...); ok {
		return p
	}
	apt := map[string]string{"numpy": "python3-numpy", "torch": "python3-torch"}
	var pkgs []string
	for _, m := range modules {
		if a, ok := apt[m]; ok {
			pkgs = append(pkgs, a)
		}
	}
	msg := fmt.Sprintf("no python3 that imports %s ($DSSP_PYTHON, python3, /usr/bin/python3; Debian: apt-get install %s)",
		strings.Join(modules, " and "), strings.Join(pkgs, " "))
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + "; CI must have it (.ci/run installs it)")
	}
	t.Skip("skipped: " + msg)
	return ""
}

// FindPython is PythonWith without a test: the interpreter and whether one
// was found.
func FindPython(modules ...string) (string, bool) { return python.Find(modules...) }

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
