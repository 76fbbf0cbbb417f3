package main

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"dsspmesh/cudaops"
	"dsspmesh/modelfile"
)

// runDssp runs the root command in process with args and returns its error.
func runDssp(t *testing.T, args ...string) error {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	return root.Execute()
}

// The door of dssp train, dssp up and dssp eval: each bad value is refused
// by the flag's name before any work (no dataset loaded, no node started,
// nothing written).
func TestDoorRefusesByName(t *testing.T) {
	dir := t.TempDir()
	notADir := filepath.Join(dir, "file")
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := cudaops.NewModel("mlp", cudaops.ModelOptions{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	theta := m.Init(1)
	theta[m.Layout()[1].Offset+3] = float32(math.NaN())
	nanFile := filepath.Join(dir, "nan.safetensors")
	if err := modelfile.WriteFile(nanFile, m.Layout(), theta, modelfile.Meta{Model: "mlp"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"train", "--batch", "1000000000"}, "--batch 1000000000: must be in [1, 65536]"},
		{[]string{"train", "--batch", "0"}, "--batch 0: must be in [1, 65536]"},
		{[]string{"train", "--lr", "inf"}, "--lr +Inf: must be a finite number in (0, 100]"},
		{[]string{"train", "--lr", "1e40"}, "--lr 1e+40: must be a finite number in (0, 100]"},
		{[]string{"train", "--lr", "nan"}, "--lr NaN: must be a finite number"},
		{[]string{"train", "--lr", "1e-50"}, "--lr 1e-50: rounds to 0 in float32"},
		{[]string{"train", "--weight-decay", "inf"}, "--weight-decay +Inf: must be a finite number in [0, 1]"},
		{[]string{"train", "--momentum", "0.99999999999"}, "--momentum 0.99999999999: rounds to 1 in float32, the optimizer's precision; it must stay below 1 (at most 0.99999994)"},
		{[]string{"train", "--momentum", "1"}, "--momentum 1: must be a finite number in [0, 1)"},
		{[]string{"train", "--out", filepath.Join(notADir, "model.safetensors")}, "--out " + filepath.Join(notADir, "model.safetensors") + " cannot be written"},
		{[]string{"train", "--out", dir}, "--out " + dir + " is a folder"},
		{[]string{"train", "--init-from", nanFile}, "--init-from " + nanFile + ": tensor " + m.Layout()[1].Name + " holds NaN at index 3"},
		{[]string{"up", "--target-acc", "nan"}, "--target-acc NaN: must be a finite number in [0, 1]"},
		{[]string{"up", "--momentum", "0.99999999999"}, "--momentum 0.99999999999: rounds to 1 in float32"},
		{[]string{"up", "--report", filepath.Join(notADir, "report")}, "--report " + filepath.Join(notADir, "report") + " cannot be created"},
		{[]string{"eval", "--model", "/dev/zero"}, "--model: /dev/zero: modelfile: not a valid safetensors file: a header of 0 bytes"},
	} {
		err := runDssp(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("dssp %s: err = %v, want one containing %q", strings.Join(c.args, " "), err, c.want)
		}
	}
}
