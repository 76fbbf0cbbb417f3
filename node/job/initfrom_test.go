package job

import (
	"encoding/json"
	"path/filepath"
	"slices"
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
	spec := DefaultSpec()
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

// TestExternalInitFromKeepsTheJobsOrder: a file an external job's mesh
// wrote names its layout in the job metadata, and --init-from takes that
// order (a safetensors file keeps its tensors sorted by name); a file
// without one leaves the order to the first trainer.
func TestExternalInitFromKeepsTheJobsOrder(t *testing.T) {
	layout, err := ParseLayout("enc.w:3x4,enc.b:3,temp:")
	if err != nil {
		t.Fatal(err)
	}
	theta := make([]float32, 16)
	for i := range theta {
		theta[i] = float32(i)
	}
	spec := DefaultSpec()
	spec.Model, spec.Layout = ExternalModel, FormatLayout(layout)
	b, _ := json.Marshal(spec)
	dir := t.TempDir()
	withJob, bare := filepath.Join(dir, "job.safetensors"), filepath.Join(dir, "bare.safetensors")
	if err := modelfile.WriteFile(withJob, layout, theta, modelfile.Meta{Model: "external", Job: string(b)}); err != nil {
		t.Fatal(err)
	}
	if err := modelfile.WriteFile(bare, layout, theta, modelfile.Meta{Model: "external"}); err != nil {
		t.Fatal(err)
	}
	l, got, tensors, err := LoadExternalInitFrom(withJob)
	if err != nil || FormatLayout(l) != spec.Layout || tensors != nil || !slices.Equal(got, theta) {
		t.Fatalf("file with its job: layout %v θ %v tensors %v err %v", l, got, tensors, err)
	}
	l, got, tensors, err = LoadExternalInitFrom(bare)
	if err != nil || l != nil || got != nil || len(tensors) != 3 {
		t.Fatalf("bare file: layout %v θ %v tensors %v err %v", l, got, tensors, err)
	}
}
