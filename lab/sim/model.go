package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Dist is the shape of a worker's compute-time distribution.
type Dist uint8

const (
	Fixed     Dist = iota // always the mean
	Jitter                // uniform in mean·[1−J, 1+J]
	LogNormal             // lognormal with the given mean and log-space sigma J
)

// ParseDist reads "fixed", "jitter" or "lognormal".
func ParseDist(s string) (Dist, error) {
	switch s {
	case "fixed":
		return Fixed, nil
	case "jitter":
		return Jitter, nil
	case "lognormal":
		return LogNormal, nil
	}
	return 0, fmt.Errorf("sim: unknown distribution %q (want fixed, jitter, lognormal)", s)
}

func (d Dist) String() string {
	switch d {
	case Fixed:
		return "fixed"
	case Jitter:
		return "jitter"
	case LogNormal:
		return "lognormal"
	}
	return fmt.Sprintf("dist(%d)", uint8(d))
}

// Model is one worker's compute time per iteration.
type Model struct {
	Dist Dist
	// Mean compute time before Slowdown.
	Mean time.Duration
	// Spread: the relative half-width for Jitter, sigma for LogNormal.
	Spread float64
	// Slowdown multiplies every draw: 4 is a machine 4× slower.
	Slowdown float64
	// Transient stragglers: at each iteration, with probability StragglerProb
	// the worker becomes StragglerFactor× slower for StragglerIters
	// iterations.
	StragglerProb   float64
	StragglerFactor float64
	StragglerIters  int
}

// Validate names the bad value.
func (m Model) Validate() error {
	switch {
	case m.Dist > LogNormal:
		return fmt.Errorf("sim: unknown distribution %d", m.Dist)
	case m.Mean <= 0:
		return fmt.Errorf("sim: compute mean %v must be positive", m.Mean)
	case m.Spread < 0 || (m.Dist == Jitter && m.Spread > 1):
		return fmt.Errorf("sim: spread %g out of range for %s", m.Spread, m.Dist)
	case !(m.Slowdown > 0) || math.IsInf(m.Slowdown, 0):
		return fmt.Errorf("sim: slow-down factor %g must be positive", m.Slowdown)
	case m.StragglerProb < 0 || m.StragglerProb > 1:
		return fmt.Errorf("sim: straggler probability %g outside [0, 1]", m.StragglerProb)
	case m.StragglerProb > 0 && (!(m.StragglerFactor >= 1) || m.StragglerIters < 1):
		return fmt.Errorf("sim: straggler factor %g must be >= 1 and iterations %d >= 1", m.StragglerFactor, m.StragglerIters)
	}
	return nil
}

// samplers draw the workers' compute times, each worker from its own
// stream seeded by (seed, worker index). The per-worker state is small and
// in one slice (its PCG by value, called directly rather than through a
// rand.Source), the models apart: a draw touches a few dozen bytes.
type samplers struct {
	models []drawModel
	w      []sampler
}

type drawModel struct {
	Model
	mu float64 // lognormal location giving mean Mean
}

type sampler struct {
	pcg      rand.PCG
	model    int32
	straggle int32      // iterations left in a transient straggle
	rng      *rand.Rand // over pcg, for NormFloat64 (lognormal only)
}

// newSamplers gives worker i the model models[i % len(models)].
func newSamplers(models []Model, seed uint64, n int) *samplers {
	s := &samplers{w: make([]sampler, n)}
	for _, m := range models {
		s.models = append(s.models, drawModel{Model: m, mu: math.Log(float64(m.Mean)) - m.Spread*m.Spread/2})
	}
	for i := range s.w {
		w := &s.w[i]
		w.pcg = *rand.NewPCG(seed, uint64(i))
		w.model = int32(i % len(models))
		if models[w.model].Dist == LogNormal {
			w.rng = rand.New(&w.pcg)
		}
	}
	return s
}

// float64 is rand.Rand.Float64 on w's stream.
func (w *sampler) float64() float64 { return float64(w.pcg.Uint64()<<11>>11) / (1 << 53) }

// next draws worker i's next compute time.
func (s *samplers) next(i int) int64 {
	w := &s.w[i]
	m := &s.models[w.model]
	d := float64(m.Mean)
	switch m.Dist {
	case Jitter:
		d *= 1 + m.Spread*(2*w.float64()-1)
	case LogNormal:
		d = math.Exp(m.mu + m.Spread*w.rng.NormFloat64())
	}
	d *= m.Slowdown
	if w.straggle == 0 && m.StragglerProb > 0 && w.float64() < m.StragglerProb {
		w.straggle = int32(min(m.StragglerIters, math.MaxInt32))
	}
	if w.straggle > 0 {
		w.straggle--
		d *= m.StragglerFactor
	}
	return max(1, int64(min(d, 1e15)))
}
