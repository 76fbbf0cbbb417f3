package node

import (
	"path/filepath"
	"strings"
	"testing"

	"dsspmesh/cudaops"
	"dsspmesh/modelfile"
)

// TestInitFromChecksTheFile: --init-from gives the file's parameters for
// the job's model, and refuses another model or a tensor of another shape
// with an error naming it.
func TestInitFromChecksTheFile(t *testing.T) {
	dir := t.TempDir()
	mlp, err := cudaops.NewModel("mlp", cudaops.ModelOptions{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	theta := mlp.Init(7)
	good := filepath.Join(dir, "mlp.safetensors")
	if err := modelfile.WriteFile(good, mlp.Layout(), theta, modelfile.Meta{Model: "mlp"}); err != nil {
		t.Fatal(err)
	}
	spec := DefaultJobSpec()
	spec.InitFrom = good
	got, err := LoadInitFrom(spec)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(theta) || got[5] != theta[5] || got[len(got)-1] != theta[len(theta)-1] {
		t.Fatal("parameters differ from the file's")
	}

	// Same tensor names, fc2.weight transposed: refused by name.
	layout := mlp.Layout()
	layout[2].Shape = []int{256, 128}
	bad := filepath.Join(dir, "transposed.safetensors")
	if err := modelfile.WriteFile(bad, layout, theta, modelfile.Meta{Model: "mlp"}); err != nil {
		t.Fatal(err)
	}
	spec.InitFrom = bad
	if _, err := LoadInitFrom(spec); err == nil || !strings.Contains(err.Error(), "--init-from") || !strings.Contains(err.Error(), "fc2.weight has shape [256 128]") {
		t.Fatalf("transposed fc2.weight: %v", err)
	}

	spec.Model, spec.InitFrom = "lenet", good
	if _, err := LoadInitFrom(spec); err == nil || !strings.Contains(err.Error(), "holds model mlp, not lenet") {
		t.Fatalf("mlp file for a lenet job: %v", err)
	}
	spec.InitFrom = filepath.Join(dir, "missing.safetensors")
	if _, err := LoadInitFrom(spec); err == nil || !strings.Contains(err.Error(), "missing.safetensors") {
		t.Fatalf("missing file: %v", err)
	}
}
