package node

import (
	"strings"
	"testing"

	"dsspmesh/shardapi"
)

func TestSpecWirePrecision(t *testing.T) {
	s := DefaultJobSpec()
	for in, want := range map[string]shardapi.Precision{"": shardapi.FP32, "fp32": shardapi.FP32, "bf16": shardapi.BF16} {
		s.WirePrecision = in
		if err := s.Validate(); err != nil || s.Precision() != want {
			t.Errorf("--wire-precision %q: %v, %v", in, s.Precision(), err)
		}
	}
	s.WirePrecision = "fp16"
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), `--wire-precision "fp16"`) {
		t.Errorf("fp16: %v, want an error naming the flag and the value", err)
	}
	// A joiner adopts the mesh's precision; an explicit other one conflicts.
	mine, mesh := DefaultJobSpec(), DefaultJobSpec()
	mine.WirePrecision, mesh.WirePrecision = "bf16", "fp32"
	if err := mine.CheckAdopt(mesh, func(f string) bool { return f == "wire-precision" }); err == nil {
		t.Error("no conflict between bf16 and fp32")
	}
	mesh.WirePrecision = "" // persisted by an older build: fp32
	mine.WirePrecision = "fp32"
	if err := mine.CheckAdopt(mesh, func(f string) bool { return f == "wire-precision" }); err != nil {
		t.Errorf("fp32 against an unset precision: %v", err)
	}
}
