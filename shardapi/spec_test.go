package shardapi

import (
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func TestPipelineSpec(t *testing.T) {
	ok := Spec{Len: 1, Policy: "ssp:1", Optimizer: DefaultOptimizer(), Pipeline: true}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	if p, err := ok.GatePolicy(); err != nil || p.String() != "ssp:0" {
		t.Errorf("gate policy %v, %v; want ssp:0", p, err)
	}
	for _, pol := range []string{"bsp", "asp", "ssp:0", "dssp:0:4", "dssp-paper:3:12"} {
		bad := ok
		bad.Policy = pol
		if err := bad.Validate(); err == nil {
			t.Errorf("%s with Pipeline validated", pol)
		}
		bad.Pipeline = false
		if err := bad.Validate(); err != nil {
			t.Errorf("%s without Pipeline: %v", pol, err)
		}
	}
	// A spec encoded before the field existed decodes with Pipeline off.
	type oldSpec struct {
		Shard     uint32    `msgpack:"shard"`
		Len       int       `msgpack:"len"`
		Policy    string    `msgpack:"policy"`
		Optimizer Optimizer `msgpack:"opt"`
	}
	b, err := msgpack.Marshal(oldSpec{Len: 1, Policy: "ssp:1", Optimizer: DefaultOptimizer()})
	if err != nil {
		t.Fatal(err)
	}
	var got Spec
	if err := msgpack.Unmarshal(b, &got); err != nil || got.Pipeline {
		t.Fatalf("old spec: %+v, %v", got, err)
	}
	if p, err := got.GatePolicy(); err != nil || p.String() != "ssp:1" {
		t.Errorf("old spec's gate policy %v, %v; want ssp:1", p, err)
	}
}

// TestSpecBounds: the outlier rule is on for a spec that names no factor,
// a push's samples are bounded by the job (more under balance), and an LR
// that float32 cannot hold is refused.
func TestSpecBounds(t *testing.T) {
	s := Spec{Len: 1, Policy: "asp", Optimizer: DefaultOptimizer()}
	if s.Outlier() != DefaultOutlierFactor || s.MaxPushSamples() != MaxBatch {
		t.Errorf("outlier factor %g, samples a push %d", s.Outlier(), s.MaxPushSamples())
	}
	s.Batch = 32
	if s.MaxPushSamples() != 32 {
		t.Errorf("samples a push %d, want the job's batch", s.MaxPushSamples())
	}
	s.OutlierFactor, s.BalanceBase = 7, 64
	if s.Outlier() != 7 || s.MaxPushSamples() != MaxBalanceWorkers*64 {
		t.Errorf("outlier factor %g, samples a push %d", s.Outlier(), s.MaxPushSamples())
	}
	for _, lr := range []float64{1e39, 3.5e38} {
		s.Optimizer.Schedule.LR = lr
		if err := s.Validate(); err == nil {
			t.Errorf("LR %g validated", lr)
		}
	}
	s.Optimizer.Schedule.LR = 3e38
	if err := s.Validate(); err != nil {
		t.Error(err)
	}
	if r := ReasonOutOfBounds.String(); r != "out-of-bounds" {
		t.Errorf("reason %q", r)
	}
}
