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
