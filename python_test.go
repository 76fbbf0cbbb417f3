package dsspmesh_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"dsspmesh/modelfile/modelfiletest"
)

// TestPythonPackage runs the Python package's unit tests (python/tests:
// stdlib unittest against a fake node on a real Unix socket and shared
// memory file) with the first interpreter that imports numpy and torch,
// else one that imports numpy (the Optimizer tests then skip themselves).
// In CI, where .ci/run installs python3-torch, torch is required.
func TestPythonPackage(t *testing.T) {
	py, ok := modelfiletest.FindPython("numpy", "torch")
	if !ok {
		if os.Getenv("CI") == "true" {
			modelfiletest.PythonWith(t, "numpy", "torch") // fails, naming the packages
		}
		py = modelfiletest.PythonWith(t, "numpy")
		t.Logf("%s has no torch: the Optimizer tests skip (Debian: apt-get install python3-torch)", py)
	}
	tests := filepath.Join("python", "tests")
	cmd := exec.Command(py, "-m", "unittest", "discover", "-s", tests, "-t", tests)
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "PYTHONPATH=python")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s -m unittest discover -s %s: %v\n%s", py, tests, err, out)
	}
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	t.Logf("%s: %s, %s", py, lines[len(lines)-3], lines[len(lines)-1])
}
