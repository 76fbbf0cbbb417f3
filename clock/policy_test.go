package clock

import (
	"errors"
	"strings"
	"testing"
)

func TestParsePolicyRoundTrip(t *testing.T) {
	for text, want := range map[string]Policy{
		"bsp":                 {Paradigm: BSP},
		"asp":                 {Paradigm: ASP},
		"ssp:3":               {Paradigm: SSP, SL: 3},
		"dssp:3:12":           {Paradigm: DSSP, SL: 3, RMax: 12},
		"dssp-paper:3:12":     {Paradigm: DSSPPaper, SL: 3, RMax: 12},
		"dssp:0:4:wait":       {Paradigm: DSSP, RMax: 4, Objective: ObjectiveWait},
		"dssp-paper:1:2:wait": {Paradigm: DSSPPaper, SL: 1, RMax: 2, Objective: ObjectiveWait},
	} {
		got, err := ParsePolicy(text)
		if err != nil || got != want {
			t.Errorf("ParsePolicy(%q) = %+v, %v; want %+v", text, got, err, want)
		}
		if got.String() != text {
			t.Errorf("String() = %q, want %q", got.String(), text)
		}
	}
	if p, err := ParsePolicy("DSSP:3:12:abs"); err != nil || p != DefaultPolicy() {
		t.Errorf("explicit abs: %+v %v", p, err)
	}
}

func TestParsePolicyErrorsNameTheText(t *testing.T) {
	for text, mention := range map[string]string{
		"":                `unknown paradigm ""`,
		"ssp":             "ssp:S",
		"ssp:x":           `"x"`,
		"ssp:-1":          "s_L=-1",
		"bsp:1":           "no parameters",
		"dssp:3":          "SL:RMAX",
		"dssp:3:-2":       "r_max=-2",
		"dssp:3:99999999": "r_max=99999999",
		"dssp:3:12:fast":  `"fast"`,
		"sgd":             `"sgd"`,
	} {
		_, err := ParsePolicy(text)
		var pe *PolicyError
		if !errors.As(err, &pe) || !errors.Is(err, ErrBadPolicy) {
			t.Errorf("ParsePolicy(%q): %v, want a *PolicyError", text, err)
			continue
		}
		if pe.Text != text || !strings.Contains(err.Error(), mention) {
			t.Errorf("ParsePolicy(%q): %q should name the text and %q", text, err, mention)
		}
	}
}

func TestValidateRejectsMismatchedParameters(t *testing.T) {
	for _, p := range []Policy{
		{},
		{Paradigm: ASP, SL: 1},
		{Paradigm: SSP, SL: 1, RMax: 1},
		{Paradigm: SSP, SL: 1, Objective: ObjectiveWait},
		{Paradigm: DSSP, Objective: 9},
		{Paradigm: DSSP, SL: MaxStaleness + 1},
	} {
		if err := p.Validate(); !errors.Is(err, ErrBadPolicy) {
			t.Errorf("%+v: %v, want ErrBadPolicy", p, err)
		}
		if _, err := NewGate(p); err == nil {
			t.Errorf("NewGate(%+v) accepted it", p)
		}
	}
}
