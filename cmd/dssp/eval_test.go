package main

import (
	"math"
	"strings"
	"testing"

	"dsspmesh/cudaops"
)

// TestEvalRefusesNonFiniteParameters: a model with a NaN or ±Inf parameter
// is refused, naming how many and the first tensor holding one.
func TestEvalRefusesNonFiniteParameters(t *testing.T) {
	l := cudaops.Layout{{Name: "fc1.weight", Offset: 0, Shape: []int{4}}, {Name: "fc1.bias", Offset: 4, Shape: []int{2}}}
	theta := []float32{1, 2, 3, 4, 5, 6}
	if err := checkFinite("m.safetensors", l, theta); err != nil {
		t.Fatalf("finite parameters refused: %v", err)
	}
	theta[5], theta[4] = float32(math.Inf(1)), float32(math.NaN())
	err := checkFinite("m.safetensors", l, theta)
	if err == nil || !strings.Contains(err.Error(), "2 of 6 parameters are NaN or ±Inf") || !strings.Contains(err.Error(), "fc1.bias") {
		t.Fatalf("NaN and +Inf in fc1.bias: %v, want a refusal naming 2 of 6 and fc1.bias", err)
	}
}
