package shard

import (
	"errors"
	"math"
	"testing"

	"dsspmesh/shardapi"
)

// With bf16 on the wire the FSM decodes bf16 gradients into fp32 master
// weights, refuses a non-finite one (NaN, ±Inf, and a finite fp32 value
// that rounds to Inf) or one of fp32 length, and replies with bf16
// parameters; snapshots keep fp32.
func TestFSMBF16(t *testing.T) {
	spec := testSpec(4, "asp")
	spec.Precision = shardapi.BF16
	spec.Optimizer = shardapi.Optimizer{Kind: shardapi.SGD, Schedule: shardapi.Schedule{LR: 1, Gamma: 1}}
	theta := []float32{1, 2, 3, 1.001} // 1.001 is not a bf16 value: master weights stay fp32
	h := newFSMHarness(t, spec, theta)
	h.apply(encodeWorker(entryAddWorker, "a", 0))
	bf := func(v ...float32) []byte { return shardapi.BF16.Append(nil, v) }
	for _, c := range []struct {
		grad []byte
		want shardapi.Reason
	}{
		{bf(1, float32(math.NaN()), 0, 0), shardapi.ReasonNonFinite},
		{bf(0, 0, float32(math.Inf(-1)), 0), shardapi.ReasonNonFinite},
		{bf(0, 0, 0, math.MaxFloat32), shardapi.ReasonNonFinite},
		{gradBytes([]float32{0, 0, 0, 0}), shardapi.ReasonBadLength},
	} {
		a := h.apply(encodePushes([]Push{{PushMeta: meta("a", 0, 1), Grad: c.grad}}))
		var rej *shardapi.RejectError
		if !errors.As(a.Pushes[0].Err, &rej) || rej.Reason != c.want {
			t.Fatalf("push %x: got %v, want %s", c.grad, a.Pushes[0].Err, c.want)
		}
	}
	a := h.apply(encodePushes([]Push{{PushMeta: meta("a", 0, 1), Grad: bf(0.5, 0.25, 1.0/3, 0)}}))
	if !a.Pushes[0].Applied {
		t.Fatalf("push: %+v", a.Pushes[0])
	}
	// θ −= g with g the bf16 rounding of the gradient, in fp32.
	want := []float32{0.5, 1.75, 3 - shardapi.FromBF16(shardapi.ToBF16(1.0/3)), 1.001}
	got := h.f.Params(nil)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("θ = %v, want %v", got, want)
		}
	}
	st, params, _ := h.f.replyFor("a", 0, true)
	if st != replyOK || len(params) != shardapi.BF16.Bytes(4) {
		t.Fatalf("reply %v with %d bytes, want OK with %d", st, len(params), shardapi.BF16.Bytes(4))
	}
	// A snapshot round trip keeps the fp32 master weights exactly.
	b, err := h.f.encodeLocked()
	if err != nil {
		t.Fatal(err)
	}
	f2 := NewFSM(spec.Shard, nil)
	if err := f2.decodeLocked(b); err != nil {
		t.Fatal(err)
	}
	if p := f2.Params(nil); p[3] != 1.001 || f2.Status().Spec.Precision != shardapi.BF16 {
		t.Fatalf("restored θ %v, spec %+v", p, f2.Status().Spec)
	}
}
