package cudaops

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDefaultBuildHasNoCU: gorgonia.org/cu exits the process at init on a
// host without a GPU, so no package of the default build may depend on it.
func TestDefaultBuildHasNoCU(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not in PATH")
	}
	out, err := exec.Command(goTool, "list", "-deps", "dsspmesh/cudaops/...", "dsspmesh/cmd/dssp").CombinedOutput()
	if err != nil {
		t.Skipf("go list: %v\n%s", err, out) // another package mid-edit must not fail this one
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "gorgonia.org/cu") {
			t.Fatalf("default build depends on %s", pkg)
		}
	}
}
