package worker

import (
	"context"
	"testing"
)

type holder struct {
	theta []float32
}

func (h *holder) NumParams() int             { return len(h.theta) }
func (h *holder) Next(int, int, int64) error { return nil }
func (h *holder) Theta() []float32           { return h.theta }
func (h *holder) Gradient(context.Context, []float32, int, int, func(int, []float32)) (float64, error) {
	return 0, nil
}

// TestThetaHolderIsFoundThroughEmulate: a Compute holding θ (an external
// trainer's shared memory) is found under the lab's emulation, so the
// worker keeps θ there.
func TestThetaHolderIsFoundThroughEmulate(t *testing.T) {
	h := &holder{theta: make([]float32, 4)}
	for _, c := range []Compute{h, Emulate(h, Emulation{Slowdown: 2, Batch: 1})} {
		if th := thetaOf(c); len(th) != 4 || &th[0] != &h.theta[0] {
			t.Fatalf("thetaOf(%T) = %p, want the holder's", c, th)
		}
	}
	if th := thetaOf(Emulate(&plain{}, Emulation{Slowdown: 2})); th != nil {
		t.Fatalf("a Compute holding no θ: %v", th)
	}
}

type plain struct{ holder }

func (p *plain) Theta() {} // not a ThetaHolder: another signature
