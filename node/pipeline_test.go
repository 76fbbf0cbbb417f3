package node

import (
	"slices"
	"testing"

	"dsspmesh/shardapi"
)

func read(index uint64, min int64) SliceRead {
	return SliceRead{Version: shardapi.Version{Index: index, Min: min}}
}

// A momentum step θ −= lr·v, v = μ·v + g: the predictor adds μ·(the last
// step) per slice, scaled down by the rounds between the two versions; a
// slice with no step to go by is left as θ.
func TestPredictorAddsTheMomentumPartOfTheStepInFlight(t *testing.T) {
	spec := JobSpec{Pipeline: true, PipelinePredict: true, Momentum: 0.5}
	p := newPredictor(spec, 6, 3)
	bounds := [][2]int{{0, 2}, {2, 4}, {4, 6}}
	theta := []float32{1, 1, 1, 1, 1, 1}
	if got := p.point(theta, bounds); &got[0] != &theta[0] {
		t.Fatal("no step yet: want θ itself")
	}
	next := []float32{0.5, 2, 0, 3, 9, 9}
	p.landed(0, 0, 2, theta, next, read(10, 4), read(14, 5), false) // one round: μ·Δ
	p.landed(1, 2, 4, theta, next, read(10, 3), read(14, 5), false) // two rounds: μ·Δ/2
	p.landed(2, 4, 6, theta, next, read(10, 4), read(14, 5), true)  // written straight into θ
	copy(theta, next)
	theta[4], theta[5] = 9, 9
	got := p.point(theta, bounds)
	want := []float32{0.5 - 0.25, 2 + 0.5, 0 - 0.25, 3 + 0.5, 9, 9}
	if !slices.Equal(got, want) {
		t.Fatalf("point %v, want %v", got, want)
	}
	if theta[0] != 0.5 || theta[2] != 0 {
		t.Fatalf("θ itself changed: %v", theta)
	}
	// An unchecked read, or versions without a round between them, predict nothing.
	p.landed(0, 0, 2, theta, []float32{7, 7}, read(14, 5), SliceRead{Version: shardapi.Version{Index: 20, Min: 6}, Unchecked: true}, false)
	p.landed(1, 2, 4, theta, []float32{0, 0, 7, 7}, read(14, 5), read(20, 5), false)
	copy(theta[:2], []float32{7, 7})
	copy(theta[2:4], []float32{7, 7})
	if got := p.point(theta, bounds); !slices.Equal(got[:4], []float32{7, 7, 7, 7}) {
		t.Fatalf("after an unchecked read and a read of the same round: %v, want θ", got[:4])
	}
}

func TestPredictorOnlyWithPipelineAndMomentum(t *testing.T) {
	if newPredictor(JobSpec{Pipeline: true, Momentum: 0.5}, 4, 1) != nil {
		t.Error("a predictor without --pipeline-predict")
	}
	if newPredictor(JobSpec{Pipeline: true, PipelinePredict: true, Optimizer: "sgd"}, 4, 1) != nil {
		t.Error("a predictor without momentum (nothing to predict)")
	}
	s := DefaultJobSpec()
	s.Paradigm, s.SLower, s.PipelinePredict = "ssp", 1, true
	if err := s.Validate(); err == nil {
		t.Error("--pipeline-predict without --pipeline accepted")
	}
	s.Pipeline = true
	if err := s.Validate(); err != nil {
		t.Errorf("ssp:1 pipelined with prediction: %v", err)
	}
}
