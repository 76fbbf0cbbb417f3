package worker

import (
	"math"
	"testing"
)

// TestOwnStepIsMomentumSGD: the change a push carries is lr·v with v =
// μ·v + g carried from step to step (torch's SGD with momentum, no
// dampening), the rate read from the mesh's samples; a step with a
// non-finite gradient zeroes the velocity; sgd is lr·g.
func TestOwnStepIsMomentumSGD(t *testing.T) {
	var rates []int64
	o := &ownStep{Own: Own{Kind: "momentum", Momentum: 0.9, Rate: func(n int64) float64 {
		rates = append(rates, n)
		return 0.5
	}}}
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	grads := [][]float32{{1, -2, 0.5}, {0.25, 1, -1}}
	want := []float32{0, 0, 0}
	vel := []float32{0, 0, 0}
	for k, g := range grads {
		o.begin(3, int64(100*k))
		d := append([]float32{}, g...)
		o.piece(0, d[:2]) // pieces as backpropagation hands them out
		o.piece(2, d[2:])
		o.end()
		for i := range g {
			vel[i] = float32(0.9*vel[i]) + g[i]
			want[i] = 0.5 * vel[i]
		}
		for i := range d {
			if d[i] != want[i] {
				t.Fatalf("step %d: change %v, want %v", k, d, want)
			}
		}
	}
	if rates[0] != 0 || rates[1] != 100 {
		t.Fatalf("rates read at %v", rates)
	}
	o.begin(3, 0)
	o.piece(0, []float32{1, float32(math.NaN()), 1})
	o.end()
	for _, v := range o.vel {
		if v != 0 {
			t.Fatalf("a NaN gradient left velocity %v", o.vel)
		}
	}
	s := &ownStep{Own: Own{Kind: "sgd", Rate: func(int64) float64 { return 0.25 }}}
	s.begin(2, 0)
	d := []float32{4, -8}
	s.piece(0, d)
	if d[0] != 1 || d[1] != -2 || s.vel != nil {
		t.Fatalf("sgd change %v (velocity %v)", d, s.vel)
	}
	for _, bad := range []Own{{Kind: "adam", Rate: o.Rate}, {Kind: "sgd", Momentum: 0.5, Rate: o.Rate}, {Kind: "momentum", Momentum: 1, Rate: o.Rate}, {Kind: "sgd"}} {
		if bad.validate() == nil {
			t.Errorf("Own %+v accepted", bad)
		}
	}
}
