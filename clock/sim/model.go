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

// sampler draws one worker's compute times from its own stream.
type sampler struct {
	m        Model
	rng      *rand.Rand
	mu       float64 // lognormal location giving mean m.Mean
	straggle int     // iterations left in a transient straggle
}

func newSampler(m Model, seed uint64, worker int) *sampler {
	s := &sampler{m: m, rng: rand.New(rand.NewPCG(seed, uint64(worker)))}
	s.mu = math.Log(float64(m.Mean)) - m.Spread*m.Spread/2
	return s
}

func (s *sampler) next() int64 {
	d := float64(s.m.Mean)
	switch s.m.Dist {
	case Jitter:
		d *= 1 + s.m.Spread*(2*s.rng.Float64()-1)
	case LogNormal:
		d = math.Exp(s.mu + s.m.Spread*s.rng.NormFloat64())
	}
	d *= s.m.Slowdown
	if s.straggle == 0 && s.m.StragglerProb > 0 && s.rng.Float64() < s.m.StragglerProb {
		s.straggle = s.m.StragglerIters
	}
	if s.straggle > 0 {
		s.straggle--
		d *= s.m.StragglerFactor
	}
	return max(1, int64(min(d, 1e15)))
}
