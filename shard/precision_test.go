package shard

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"testing"

	"dsspmesh/clock"
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
	b, err := h.f.st.encode()
	if err != nil {
		t.Fatal(err)
	}
	f2 := NewFSM(spec.Shard, nil)
	if err := f2.Restore(nopCloser{bytes.NewReader(b)}); err != nil {
		t.Fatal(err)
	}
	if p := f2.Params(nil); p[3] != 1.001 || f2.Status().Spec.Precision != shardapi.BF16 {
		t.Fatalf("restored θ %v, spec %+v", p, f2.Status().Spec)
	}
}

// With int8 or int4 gradients the FSM applies the decoded gradient, takes a
// leader's sum of a group in bf16 (and refuses one in the gradients' length),
// refuses a non-finite block, and replies with bf16 parameters.
func TestFSMINT8(t *testing.T) {
	for _, p := range []shardapi.Precision{shardapi.INT8, shardapi.INT4} {
		t.Run(p.String(), func(t *testing.T) { testFSMFeedbackPrecision(t, p) })
	}
}

func testFSMFeedbackPrecision(t *testing.T, p shardapi.Precision) {
	spec := testSpec(3, "asp")
	spec.Precision = p
	spec.Optimizer = shardapi.Optimizer{Kind: shardapi.SGD, Schedule: shardapi.Schedule{LR: 1, Gamma: 1}}
	h := newFSMHarness(t, spec, []float32{1, 2, 3})
	for _, w := range []clock.WorkerID{"a", "b", "c"} {
		h.apply(encodeWorker(entryAddWorker, w, 0))
	}
	g := []float32{0.5, -1.27, 0.3}
	a := h.apply(encodePushes([]Push{{PushMeta: meta("a", 0, 1), Grad: p.Append(nil, g)}}))
	if !a.Pushes[0].Applied {
		t.Fatalf("push: %+v", a.Pushes[0])
	}
	dec := make([]float32, 3)
	p.Decode(dec, p.Append(nil, g))
	want := []float32{1 - dec[0], 2 - dec[1], 3 - dec[2]}
	if got := h.f.Params(nil); !slices.Equal(got, want) {
		t.Fatalf("θ = %v, want %v", got, want)
	}
	bad := p.Append(nil, []float32{0, float32(math.Inf(1)), 0})
	a = h.apply(encodePushes([]Push{{PushMeta: meta("b", 0, 1), Grad: bad}}))
	var rej *shardapi.RejectError
	if !errors.As(a.Pushes[0].Err, &rej) || rej.Reason != shardapi.ReasonNonFinite {
		t.Fatalf("non-finite push: %v", a.Pushes[0].Err)
	}
	group := []Push{{PushMeta: meta("b", 0, 1)}, {PushMeta: meta("c", 0, 1)}}
	if p.Bytes(3) != shardapi.BF16.Bytes(3) { // int4's 3 values are bf16's 6 bytes
		a = h.apply(encodeGroup(group, p.Append(nil, []float32{1, 1, 1}), nil))
		if !errors.As(a.Pushes[0].Err, &rej) || rej.Reason != shardapi.ReasonBadLength {
			t.Fatalf("a sum in %s: %+v", p, a.Pushes[0])
		}
	}
	a = h.apply(encodeGroup(group, shardapi.BF16.Append(nil, []float32{1, 1, 1}), nil))
	if !a.Pushes[0].Applied || !a.Pushes[1].Applied {
		t.Fatalf("a sum in bf16: %+v", a.Pushes)
	}
	if got := h.f.Params(nil); got[0] != want[0]-1 {
		t.Fatalf("θ after the sum = %v", got)
	}
	st, params, _ := h.f.replyFor("a", 0, true)
	if st != replyOK || len(params) != shardapi.BF16.Bytes(3) {
		t.Fatalf("reply %v with %d bytes, want OK with %d (bf16)", st, len(params), shardapi.BF16.Bytes(3))
	}
}
