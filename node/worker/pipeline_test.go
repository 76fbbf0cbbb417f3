package worker

import (
	"context"
	"math"
	"testing"

	"dsspmesh/cudaops"
	"dsspmesh/shardapi"
)

// A batch computed in two parts on the same θ — the first ahead into
// w.part, the rest mixed in by gradient — encodes the gradient of the
// whole batch computed at once (fp32 on the wire, two shards), to float
// tolerance: each part is weighted by its samples, not by halves.
func TestGradientInTwoPartsIsTheWholeBatchs(t *testing.T) {
	model, err := cudaops.NewModel("mlp", cudaops.ModelOptions{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	data, err := cudaops.NewSynthetic(cudaops.DefaultSyntheticConfig())
	if err != nil {
		t.Fatal(err)
	}
	const batch = 47
	n, in := model.NumParams(), model.InputSize()
	mc := &ModelCompute{model: model, x: make([]float32, batch*in), labels: make([]int, batch)}
	for i := range batch {
		mc.labels[i] = data.Sample(i, mc.x[i*in:(i+1)*in])
	}
	w := newWorker(Deps{Compute: mc}, Config{Bounds: [][2]int{{0, n / 3}, {n / 3, n}}, Batch: batch, Precision: shardapi.FP32}, nil)
	w.theta = model.Init(7)
	w.encs[0] = w.newEncoders()
	push := []bool{false, false} // no int8 residual to feed back

	decode := func(grad [][]byte) []float32 {
		out := make([]float32, n)
		for s, b := range w.cfg.Bounds {
			if _, err := shardapi.FP32.Decode(out[b[0]:b[1]], grad[s]); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}
	ctx := context.Background()
	wholeLoss, g, err := w.gradient(ctx, 0, batch, push)
	if err != nil {
		t.Fatal(err)
	}
	whole := decode(g)

	for _, fresh := range []float64{0.5, 0.25, 0.9} {
		ahead := aheadOf(fresh, batch)
		if ahead < 1 || ahead >= batch {
			t.Fatalf("fresh %g: %d of %d ahead", fresh, ahead, batch)
		}
		lossA, err := w.aheadGradient(ctx, ahead)
		if err != nil {
			t.Fatal(err)
		}
		lossB, g, err := w.gradient(ctx, ahead, batch, push)
		if err != nil {
			t.Fatal(err)
		}
		two := decode(g)
		var worst float64
		for i := range whole {
			worst = math.Max(worst, math.Abs(float64(two[i]-whole[i]))/(1e-3+math.Abs(float64(whole[i]))))
		}
		loss := (float64(ahead)*lossA + float64(batch-ahead)*lossB) / batch
		t.Logf("fresh %g: %d ahead, %d after; worst relative difference %.2g, loss %.6f against %.6f", fresh, ahead, batch-ahead, worst, loss, wholeLoss)
		if worst > 1e-4 || math.Abs(loss-wholeLoss) > 1e-5 {
			t.Errorf("fresh %g: two parts differ from the whole batch by %.2g (loss %g, want %g)", fresh, worst, loss, wholeLoss)
		}
	}
}

func TestAheadOf(t *testing.T) {
	for _, c := range []struct {
		fresh        float64
		batch, ahead int
	}{
		{0, 64, 64},    // the whole batch ahead (a spec from before the field)
		{0.5, 64, 32},  // half
		{0.5, 23, 11},  // rounds the fresh part: 11.5 → 12
		{0.5, 1, 1},    // a batch of one goes whole
		{0.01, 64, 63}, // 0.64 rounds to one fresh sample
		{0.004, 64, 64},
		{0.99, 10, 1}, // at least one ahead
		{0.5, 2, 1},
	} {
		if got := aheadOf(c.fresh, c.batch); got != c.ahead {
			t.Errorf("fresh %g, batch %d: %d ahead, want %d", c.fresh, c.batch, got, c.ahead)
		}
	}
}
