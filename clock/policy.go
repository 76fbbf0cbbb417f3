package clock

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Paradigm is a synchronization paradigm.
type Paradigm uint8

// The paradigms. The zero value is not valid, so an unset Policy fails
// Validate instead of silently meaning one of them.
const (
	BSP       Paradigm = iota + 1 // bulk synchronous: SSP(0)
	ASP                           // asynchronous: every push released at once
	SSP                           // stale synchronous: gap <= s
	DSSP                          // bounded dynamic SSP: gap <= s_L + r_max, always
	DSSPPaper                     // the paper's Algorithm 1 literally: gap unbounded
)

var paradigmNames = [...]string{BSP: "bsp", ASP: "asp", SSP: "ssp", DSSP: "dssp", DSSPPaper: "dssp-paper"}

func (p Paradigm) String() string {
	if p >= BSP && p <= DSSPPaper {
		return paradigmNames[p]
	}
	return fmt.Sprintf("paradigm(%d)", uint8(p))
}

// ParseParadigm reads a paradigm's name as String writes it (exactly: bsp,
// asp, ssp, dssp or dssp-paper).
func ParseParadigm(name string) (Paradigm, error) {
	for p := BSP; p <= DSSPPaper; p++ {
		if paradigmNames[p] == name {
			return p, nil
		}
	}
	return 0, fmt.Errorf("unknown paradigm %q (want %s)", name, strings.Join(ParadigmNames(), ", "))
}

// ParadigmNames are the paradigms' names, in order: bsp, asp, ssp, dssp,
// dssp-paper.
func ParadigmNames() []string { return append([]string(nil), paradigmNames[BSP:]...) }

// Objective is what the DSSP controller minimises.
type Objective uint8

const (
	// ObjectiveAbs is the paper's: |Sim_s[k] − Sim_p[r]|.
	ObjectiveAbs Objective = iota
	// ObjectiveWait is the one-sided wait of p for the slowest worker's next
	// push after p's arrival.
	ObjectiveWait
)

func (o Objective) String() string {
	switch o {
	case ObjectiveAbs:
		return "abs"
	case ObjectiveWait:
		return "wait"
	}
	return fmt.Sprintf("objective(%d)", uint8(o))
}

// Limits that keep every computation of the gate inside int64 and the
// controller's cost bounded.
const (
	MaxStaleness = int64(1) << 40
	MaxRMax      = int64(1) << 16
)

// Policy is a paradigm with its parameters.
type Policy struct {
	Paradigm Paradigm
	// SL is s_L for DSSP and dssp-paper, s for SSP, 0 for BSP and ASP.
	SL int64
	// RMax is r_max for DSSP and dssp-paper, 0 otherwise. s_U = SL + RMax.
	RMax int64
	// Objective of the DSSP controller; ObjectiveAbs (the paper's) by default.
	Objective Objective
}

// DefaultPolicy is bounded DSSP with s_L = 3, r_max = 12.
func DefaultPolicy() Policy { return Policy{Paradigm: DSSP, SL: 3, RMax: 12} }

// SU is the upper staleness bound s_U = s_L + r_max.
func (p Policy) SU() int64 { return p.SL + p.RMax }

// Bounded reports whether the policy guarantees gap <= s_U for every OK.
func (p Policy) Bounded() bool { return p.Paradigm != ASP && p.Paradigm != DSSPPaper }

// Pipelined is the policy a gate releases by when every worker computes
// one iteration ahead of its acknowledged pushes (a job's --pipeline:
// iteration t is computed while push t−1 is in flight, on the slices the OK
// of push t−2 carried). It is p with s_L one lower (s − 1 for ssp) and the
// same r_max, so releases happen at gap ≤ s_L − 1 (rule 2, sweep) and
// ≤ s_U − 1 (grants), and the slices an iteration computes on stay within
// p's own s_L and s_U (docs/design.md, "The read guarantee"). Only ssp and
// dssp with s_L ≥ 1 have an iteration to give: bsp, ssp:0 and dssp:0:r
// cannot release earlier than gap 0, and asp and dssp-paper bound nothing.
func (p Policy) Pipelined() (Policy, error) {
	if err := p.Validate(); err != nil {
		return Policy{}, err
	}
	if (p.Paradigm != SSP && p.Paradigm != DSSP) || p.SL < 1 {
		return Policy{}, &PolicyError{Text: p.String(), Reason: "pipelining needs ssp or dssp with s_L >= 1 (one iteration of the bound to compute ahead with)"}
	}
	p.SL--
	return p, nil
}

// Validate checks the parameters against the paradigm; the error names the
// bad value.
func (p Policy) Validate() error {
	bad := func(reason string, args ...any) error {
		return &PolicyError{Text: p.String(), Reason: fmt.Sprintf(reason, args...)}
	}
	switch p.Paradigm {
	case BSP, ASP:
		if p.SL != 0 || p.RMax != 0 {
			return bad("%s takes no parameters (s_L=%d, r_max=%d)", p.Paradigm, p.SL, p.RMax)
		}
	case SSP:
		if p.RMax != 0 {
			return bad("ssp takes no r_max (r_max=%d)", p.RMax)
		}
	case DSSP, DSSPPaper:
	default:
		return &PolicyError{Text: p.Paradigm.String(), Reason: "unknown paradigm"}
	}
	if p.SL < 0 || p.SL > MaxStaleness {
		return bad("s_L=%d is outside [0, %d]", p.SL, MaxStaleness)
	}
	if p.RMax < 0 || p.RMax > MaxRMax {
		return bad("r_max=%d is outside [0, %d]", p.RMax, MaxRMax)
	}
	if p.Objective != ObjectiveAbs && p.Objective != ObjectiveWait {
		return bad("unknown objective %d", p.Objective)
	}
	if p.Objective != ObjectiveAbs && p.Paradigm != DSSP && p.Paradigm != DSSPPaper {
		return bad("objective %s applies only to dssp and dssp-paper", p.Objective)
	}
	return nil
}

// String is the text form ParsePolicy reads.
func (p Policy) String() string {
	switch p.Paradigm {
	case BSP, ASP:
		return p.Paradigm.String()
	case SSP:
		return fmt.Sprintf("ssp:%d", p.SL)
	}
	s := fmt.Sprintf("%s:%d:%d", p.Paradigm, p.SL, p.RMax)
	if p.Objective != ObjectiveAbs {
		s += ":" + p.Objective.String()
	}
	return s
}

// ParsePolicy reads "bsp", "asp", "ssp:S", "dssp:SL:RMAX" or
// "dssp-paper:SL:RMAX", the last two optionally followed by ":abs" (the
// default) or ":wait". Errors are *PolicyError naming the bad text.
func ParsePolicy(text string) (Policy, error) {
	parts := strings.Split(strings.TrimSpace(text), ":")
	name := strings.ToLower(parts[0])
	args := parts[1:]
	num := func(i int, what string) (int64, error) {
		v, err := strconv.ParseInt(args[i], 10, 64)
		if err != nil {
			return 0, &PolicyError{Text: text, Reason: fmt.Sprintf("%s %q is not an integer", what, args[i])}
		}
		return v, nil
	}
	arity := func(want string) error {
		return &PolicyError{Text: text, Reason: "want " + want}
	}
	var p Policy
	var err error
	if p.Paradigm, err = ParseParadigm(name); err != nil {
		return Policy{}, &PolicyError{Text: text, Reason: fmt.Sprintf("unknown paradigm %q (want %s)", parts[0], strings.Join(ParadigmNames(), ", "))}
	}
	switch p.Paradigm {
	case BSP, ASP:
		if len(args) != 0 {
			return Policy{}, arity(name + " with no parameters")
		}
	case SSP:
		if len(args) != 1 {
			return Policy{}, arity("ssp:S")
		}
		if p.SL, err = num(0, "s"); err != nil {
			return Policy{}, err
		}
	case DSSP, DSSPPaper:
		if len(args) != 2 && len(args) != 3 {
			return Policy{}, arity(name + ":SL:RMAX[:abs|:wait]")
		}
		if p.SL, err = num(0, "s_L"); err != nil {
			return Policy{}, err
		}
		if p.RMax, err = num(1, "r_max"); err != nil {
			return Policy{}, err
		}
		if len(args) == 3 {
			switch strings.ToLower(args[2]) {
			case "abs":
			case "wait":
				p.Objective = ObjectiveWait
			default:
				return Policy{}, &PolicyError{Text: text, Reason: fmt.Sprintf("objective %q is not abs or wait", args[2])}
			}
		}
	}
	if err := p.Validate(); err != nil {
		var pe *PolicyError
		if errors.As(err, &pe) {
			pe.Text = text
		}
		return Policy{}, err
	}
	return p, nil
}
