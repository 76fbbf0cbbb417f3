package balance

import (
	"math"
	"slices"
)

// Model is one worker's predicted compute time for a batch of b samples:
// A + P·b nanoseconds. A is the per-iteration overhead (kernel launches,
// a fixed cost of the step), P the time per sample; P > 0.
type Model struct {
	A float64 // ns per iteration
	P float64 // ns per sample
	// Noise is the relative standard error of P as the window fitted it:
	// the spread of its per-sample times (1.4826·MAD, a robust σ) over
	// √n, times 1.2533 for a median, over P. Two models whose P differ by
	// less than a few Noise are not known to differ. 0 when not fitted.
	Noise float64
}

// Time is the predicted compute time of a batch of b samples, in ns.
func (m Model) Time(b int64) float64 { return m.A + float64(m.P*float64(b)) }

// Speed is samples per second at batch b (0 when b is 0).
func (m Model) Speed(b int64) float64 {
	if b <= 0 {
		return 0
	}
	return float64(b) / m.Time(b) * 1e9
}

// Obs is one iteration as the worker measured it.
type Obs struct {
	Samples   int64 // batch size
	ComputeNs int64 // compute time of that batch
}

// minPerSampleNs keeps P positive: a model that claims free samples would
// be handed the whole batch.
const minPerSampleNs = 1e-3

// Window is the last Cap observations of one worker, oldest first, and the
// overhead A estimated from them (kept when they cannot separate it).
type Window struct {
	Cap int
	Obs []Obs
	A   float64
}

// Add records o, dropping the oldest beyond Cap. Observations with no
// samples or no time say nothing about speed and are ignored.
func (w *Window) Add(o Obs) bool {
	if o.Samples <= 0 || o.ComputeNs <= 0 {
		return false
	}
	if len(w.Obs) >= max(1, w.Cap) {
		copy(w.Obs, w.Obs[1:])
		w.Obs = w.Obs[:len(w.Obs)-1]
	}
	w.Obs = append(w.Obs, o)
	return true
}

// separate is the least relative difference between two batch sizes for
// their pair to enter the overhead's slope estimate: closer batches make the
// slope mostly jitter.
const separate = 0.2

// Fit estimates the model from the window; false when it holds fewer than
// min observations.
//
// A: when at least 3 pairs of observations have batches at least 20%
// apart, the Theil–Sen estimate (median slope over those pairs, median
// intercept), clamped to [0, 0.9·the shortest time seen]; otherwise the
// previous A. P: the median of (t − A)/b over the window, at least
// minPerSampleNs. Medians make one outlier irrelevant and let a lasting
// change of speed take over once it is half the window.
func (w *Window) Fit(min int) (Model, bool) {
	n := len(w.Obs)
	if n == 0 || n < min {
		return Model{}, false
	}
	var slopes []float64
	for i := range n {
		for j := i + 1; j < n; j++ {
			bi, bj := float64(w.Obs[i].Samples), float64(w.Obs[j].Samples)
			if math.Abs(bi-bj) < separate*math.Max(bi, bj) {
				continue
			}
			slopes = append(slopes, (float64(w.Obs[j].ComputeNs)-float64(w.Obs[i].ComputeNs))/(bj-bi))
		}
	}
	if len(slopes) >= 3 {
		p := median(slopes)
		icpt := make([]float64, n)
		shortest := math.Inf(1)
		for i, o := range w.Obs {
			icpt[i] = float64(o.ComputeNs) - float64(p*float64(o.Samples))
			shortest = math.Min(shortest, float64(o.ComputeNs))
		}
		w.A = math.Min(math.Max(median(icpt), 0), float64(0.9*shortest))
	}
	per := make([]float64, n)
	for i, o := range w.Obs {
		per[i] = (float64(o.ComputeNs) - w.A) / float64(o.Samples)
	}
	p := math.Max(median(per), minPerSampleNs)
	for i, x := range per { // per's deviations from p, in place: per is spent
		per[i] = math.Abs(x - p)
	}
	sigma := 1.4826 * median(per)
	noise := 1.2533 * sigma / math.Sqrt(float64(n)) / p
	return Model{A: w.A, P: p, Noise: noise}, true
}

// median sorts v in place and returns its median (the mean of the middle
// two for an even length).
func median(v []float64) float64 {
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}
