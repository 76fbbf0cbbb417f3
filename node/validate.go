package node

import (
	"dsspmesh/node/job"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"
)

// Documented ranges of the numeric flags (see the flag help and
// docs/reliability.md). Every value must also be finite: NaN and ±Inf pass
// naive comparisons and then freeze or corrupt the mesh.
const (
	MaxSlowdown     = 1000      // --slowdown: a worker 1000× slower is already gone
	MaxComputeDelay = time.Hour // --compute-delay
	MaxTimeout      = 24 * time.Hour
	MinEvalEvery    = 100 * time.Millisecond
	// DefaultAuditFraction: one claim in twenty re-evaluated by a second
	// member (docs/design.md, "The evaluator", says what it costs).
	DefaultAuditFraction = 0.05
)

// CheckDuration returns an error naming flag and d unless lo ≤ d ≤ hi.
func CheckDuration(flag string, d, lo, hi time.Duration) error {
	if d < lo || d > hi {
		return fmt.Errorf("--%s %v: must be in [%v, %v]", flag, d, lo, hi)
	}
	return nil
}

// CheckSlowdown is the one check of a --slowdown factor, wherever it is
// given (dssp node, dssp up, dssp-lab bench paradigms).
func CheckSlowdown(v float64) error {
	if err := job.CheckFloat("slowdown", v, 1, MaxSlowdown, false); err != nil {
		return fmt.Errorf("%w (it stretches a worker's compute time)", err)
	}
	return nil
}

// ParseFloats reads a comma-separated list of numbers (1,1,2,4) given to
// flag; every value must be finite.
func ParseFloats(flag, text string) ([]float64, error) {
	var out []float64
	for _, p := range strings.Split(text, ",") {
		f, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("--%s: %q is not a finite number", flag, p)
		}
		out = append(out, f)
	}
	return out, nil
}

// ParseLogLevel reads --log-level: debug, info, warn or error.
func ParseLogLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(s))); err != nil {
		return 0, fmt.Errorf("--log-level %q must be debug, info, warn or error", s)
	}
	return l, nil
}
