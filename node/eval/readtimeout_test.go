package eval

import (
	"testing"
	"time"
)

// TestEvalReadTimeoutFollowsTheSlowestPath: a model read for an evaluation
// waits at least as long as at evalReadRate, and longer when the slowest
// measured path's share is slower (a 100 Mbit/s link between sites); a
// fast or unmeasured path changes nothing.
func TestEvalReadTimeoutFollowsTheSlowestPath(t *testing.T) {
	const model = 100 << 20
	flat := evalReadTimeout(model, 0)
	if want := 10*time.Second + 25*time.Second; flat != want {
		t.Errorf("unmeasured: %v, want %v", flat, want)
	}
	if got := evalReadTimeout(model, 1e9); got != flat {
		t.Errorf("a 1 GB/s path: %v, want the floor's %v", got, flat)
	}
	link := 100e6 / 8 // 100 Mbit/s, measured
	want := 10*time.Second + time.Duration(float64(model)/(link*pathShare)*float64(time.Second))
	if got := evalReadTimeout(model, link); got != want || got <= flat {
		t.Errorf("a 100 Mbit/s path: %v, want %v (more than %v)", got, want, flat)
	}
}
