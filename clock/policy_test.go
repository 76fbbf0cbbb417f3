package clock

import (
	"errors"
	"fmt"
	"math/rand/v2"
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

// TestParadigmNames: the paradigms' names are clock's, in one list
// (job.Spec validates and writes --paradigm with it): each parses back to
// its paradigm, exactly (no other case), and an unknown one is refused
// naming the list.
func TestParadigmNames(t *testing.T) {
	names := ParadigmNames()
	if got := strings.Join(names, ","); got != "bsp,asp,ssp,dssp,dssp-paper" {
		t.Fatalf("ParadigmNames() = %s", got)
	}
	for i, name := range names {
		p, err := ParseParadigm(name)
		if err != nil || p != Paradigm(i+1) || p.String() != name {
			t.Errorf("ParseParadigm(%q) = %v, %v", name, p, err)
		}
	}
	names[0] = "changed" // a copy: the next caller's list is whole
	for _, bad := range []string{"BSP", "ssp:3", "", "changed"} {
		if _, err := ParseParadigm(bad); err == nil || !strings.Contains(err.Error(), "bsp, asp, ssp, dssp, dssp-paper") {
			t.Errorf("ParseParadigm(%q): %v, want an error naming the paradigms", bad, err)
		}
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

func TestPipelinedLowersSLByOne(t *testing.T) {
	for text, want := range map[string]string{
		"ssp:1":         "ssp:0",
		"ssp:3":         "ssp:2",
		"dssp:3:12":     "dssp:2:12",
		"dssp:1:4:wait": "dssp:0:4:wait",
	} {
		p, _ := ParsePolicy(text)
		got, err := p.Pipelined()
		if err != nil || got.String() != want || got.SU() != p.SU()-1 {
			t.Errorf("%s.Pipelined() = %v, %v; want %s", text, got, err, want)
		}
	}
	for _, text := range []string{"bsp", "asp", "ssp:0", "dssp:0:4", "dssp-paper:3:12"} {
		p, _ := ParsePolicy(text)
		if _, err := p.Pipelined(); !errors.Is(err, ErrBadPolicy) {
			t.Errorf("%s.Pipelined(): %v, want ErrBadPolicy", text, err)
		}
	}
}

// TestPipelinedReadsKeepTheBound drives workers that compute one iteration
// ahead (iteration u on the t_min at the release of push u−2, while push
// u−1 waits in the gate) through a gate of p.Pipelined() in a random order,
// and checks that every iteration's read is within p's s_U, and within s_L
// when no grant released the push it read at.
func TestPipelinedReadsKeepTheBound(t *testing.T) {
	for seed := range uint64(30) {
		r := rand.New(rand.NewPCG(seed, 16))
		p := Policy{Paradigm: SSP, SL: 1 + r.Int64N(3)}
		if seed%2 == 1 {
			p = Policy{Paradigm: DSSP, SL: 1 + r.Int64N(3), RMax: r.Int64N(6)}
		}
		gp, err := p.Pipelined()
		if err != nil {
			t.Fatal(err)
		}
		g, _ := NewGate(gp)
		const n = 4
		type wk struct {
			next    int64   // iteration of the next push
			held    bool    // its last push waits in the gate
			rel     []int64 // t_min at the release of each push, by iteration
			granted []bool  // whether a grant (rule 1 or 3) released it
		}
		ws := make([]*wk, n)
		ids := make([]WorkerID, n)
		for i := range ws {
			ids[i] = WorkerID(fmt.Sprintf("w%d", i))
			if _, err := g.AddWorker(ids[i]); err != nil {
				t.Fatal(err)
			}
			ws[i] = &wk{}
		}
		released := func(i int, grant bool) {
			w := ws[i]
			w.held = false
			w.rel = append(w.rel, g.Min())
			w.granted = append(w.granted, grant)
		}
		for step := range 4000 {
			i := r.IntN(n)
			if r.IntN(4*(i+1)) != 0 { // worker i is i+1 times slower
				continue
			}
			w := ws[i]
			if w.held {
				continue
			}
			u := w.next + 1 // the iteration computed while push w.next is in flight
			if u >= 2 {
				m := w.rel[u-2]
				bound := p.SL
				if w.granted[u-2] {
					bound = p.SU()
				}
				if u-m > bound {
					t.Fatalf("seed %d step %d %s: iteration %d read t_min %d, bound %d (%s)", seed, step, ids[i], u, m, bound, p)
				}
			}
			out, err := g.Push(ids[i], w.next, int64(step)*1000)
			if err != nil {
				t.Fatalf("seed %d: push %s/%d: %v", seed, ids[i], w.next, err)
			}
			w.next++
			w.held = !out.Released
			if out.Released {
				released(i, out.Rule != RuleWithin)
			}
			for _, o := range out.Others {
				var j int
				fmt.Sscanf(string(o.Worker), "w%d", &j)
				released(j, false)
			}
		}
	}
}
