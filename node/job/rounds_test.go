package job

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"dsspmesh/shardapi"
)

// TestRoundsDefaults: one local step is one step of the worker's own
// optimizer combined by the mean (the combine rule's default); a spec
// persisted before local rounds and the combine rule reads as H = 1 with
// the sum rule (no outer rule: the shards step on gradients); H > 1 takes
// DiLoCo's outer defaults and inner sgd.
func TestRoundsDefaults(t *testing.T) {
	s := DefaultSpec()
	if s.Rounds() || s.Outer() != (shardapi.Outer{Kind: shardapi.OuterMean, LR: 1}) || !s.Deltas() || s.Steps() != 1 || s.RoundSamples() != int64(s.BatchSize) {
		t.Fatalf("default spec: rounds %v, outer %+v, steps %d", s.Rounds(), s.Outer(), s.Steps())
	}
	var old Spec // a spec persisted before local rounds and the combine rule
	b, _ := json.Marshal(s)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	delete(m, "local_steps")
	delete(m, "combine")
	b, _ = json.Marshal(m)
	if err := json.Unmarshal(b, &old); err != nil || old.Steps() != 1 || old.Rounds() || old.Outer().On() || old.CombineRule() != CombineSum || old.Validate() != nil {
		t.Fatalf("old spec: %+v, %v", old, err)
	}
	s.LocalSteps = 16
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if o := s.Outer(); o != (shardapi.Outer{Kind: shardapi.OuterNesterov, LR: 0.7, Momentum: 0.9}) {
		t.Fatalf("H=16 outer %+v, want nesterov 0.7/0.9", o)
	}
	if in := s.Inner(); in != (Inner{Kind: "sgd", LR: 0.3}) {
		t.Fatalf("inner %+v", in)
	}
	p := s
	p.Paradigm, p.SLower, p.Pipeline = "ssp", 1, true
	if err := p.Validate(); err != nil {
		t.Fatalf("pipelined local rounds: %v", err)
	}
	if s.RoundSamples() != 16*int64(s.BatchSize) {
		t.Fatalf("round samples %d", s.RoundSamples())
	}
	s.OuterOptimizer, s.InnerOptimizer = "sgd", "adam"
	if o, in := s.Outer(), s.Inner(); o != (shardapi.Outer{Kind: shardapi.OuterSGD, LR: 1}) || in.LR != DefaultInnerAdamLR {
		t.Fatalf("sgd/adam: %+v %+v", o, in)
	}
}

// TestRoundsValidation: every bad value is named.
func TestRoundsValidation(t *testing.T) {
	for _, c := range []struct {
		set  func(*Spec)
		want string
	}{
		{func(s *Spec) { s.LocalSteps = -1 }, "--local-steps -1"},
		{func(s *Spec) { s.LocalSteps = MaxLocalSteps + 1 }, "--local-steps 16385"},
		{func(s *Spec) { s.LocalSteps, s.BatchSize = 2048, 64 }, "131072 samples a round"},
		{func(s *Spec) { s.LocalSteps, s.OuterOptimizer = 4, "adamw" }, `--outer-optimizer "adamw"`},
		{func(s *Spec) { s.LocalSteps, s.InnerOptimizer = 4, "lamb" }, `--inner-optimizer "lamb"`},
		{func(s *Spec) { s.OuterLR = 0.5 }, "--outer-lr 0.5 needs local rounds"},
		{func(s *Spec) { s.OuterOptimizer = "sgd" }, "--outer-optimizer sgd needs local rounds"},
		{func(s *Spec) { s.InnerOptimizer = "adam" }, "--inner-optimizer adam needs local rounds"},
		{func(s *Spec) { s.LocalSteps, s.OuterLR = 4, -1 }, "--outer-lr -1"},
		{func(s *Spec) { s.LocalSteps, s.OuterLR = 4, 1000 }, "--outer-lr 1000"},
		{func(s *Spec) { s.LocalSteps, s.OuterMomentum = 4, 1 }, "--outer-momentum"},
		{func(s *Spec) { s.LocalSteps, s.OuterOptimizer, s.OuterMomentum = 4, "sgd", 0.5 }, "--outer-momentum 0.5 needs --outer-optimizer nesterov"},
		{func(s *Spec) { s.LocalSteps, s.InnerLR = 4, -0.1 }, "--inner-lr -0.1"},
		{func(s *Spec) { s.LocalSteps, s.BatchSize, s.Balance = 2, 4, true }, "--balance with --local-steps 2 × --batch 4 = 8 samples a round"},
	} {
		s := DefaultSpec()
		c.set(&s)
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want an error naming %q, got %v", c.want, err)
		}
	}
}

// TestRoundsFlagsConflict: a joiner's explicit round flag that disagrees
// with the mesh's job is a ConflictError; one that names the mesh's
// default explicitly is not.
func TestRoundsFlagsConflict(t *testing.T) {
	mesh := DefaultSpec()
	mesh.LocalSteps = 16
	for _, c := range []struct {
		args     []string
		conflict string
	}{
		{[]string{"--local-steps", "16"}, ""},
		{[]string{"--local-steps", "16", "--outer-optimizer", "nesterov", "--outer-lr", "0.7", "--outer-momentum", "0.9"}, ""},
		{[]string{"--local-steps", "4"}, "--local-steps 4 (mesh: 16)"},
		{[]string{"--local-steps", "16", "--outer-optimizer", "sgd"}, "--outer-optimizer sgd (mesh: nesterov)"},
		{[]string{"--local-steps", "16", "--inner-optimizer", "adam"}, "--inner-optimizer adam (mesh: sgd)"},
		{[]string{"--local-steps", "16", "--inner-lr", "0.05"}, "--inner-lr 0.05 (mesh: 0.3)"},
		{[]string{"--local-steps", "16", "--inner-lr", "0.3"}, ""},
		{[]string{"--local-steps", "16", "--outer-lr", "0.5"}, "--outer-lr 0.5 (mesh: 0.7)"},
	} {
		mine := DefaultSpec()
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		mine.BindFlags(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		err := mine.CheckAdopt(mesh, func(f string) bool { return fs.Changed(f) })
		var ce *ConflictError
		switch {
		case c.conflict == "" && err != nil:
			t.Errorf("%v: %v", c.args, err)
		case c.conflict != "" && (!errors.As(err, &ce) || !strings.Contains(err.Error(), c.conflict)):
			t.Errorf("%v: %v, want a conflict naming %q", c.args, err, c.conflict)
		}
	}
}
