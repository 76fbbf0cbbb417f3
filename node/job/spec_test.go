package job

import (
	"math"
	"strings"
	"testing"

	"dsspmesh/shardapi"
)

func TestSpecWirePrecision(t *testing.T) {
	s := DefaultSpec()
	for in, want := range map[string]shardapi.Precision{"": shardapi.FP32, "fp32": shardapi.FP32, "bf16": shardapi.BF16, "int4": shardapi.INT4} {
		s.WirePrecision = in
		if err := s.Validate(); err != nil || s.Precision() != want {
			t.Errorf("--wire-precision %q: %v, %v", in, s.Precision(), err)
		}
	}
	s.WirePrecision = "fp16"
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), `--wire-precision "fp16"`) {
		t.Errorf("fp16: %v, want an error naming the flag and the value", err)
	}
	// A joiner adopts the mesh's precision; an explicit other one conflicts.
	mine, mesh := DefaultSpec(), DefaultSpec()
	mine.WirePrecision, mesh.WirePrecision = "bf16", "fp32"
	if err := mine.CheckAdopt(mesh, func(f string) bool { return f == "wire-precision" }); err == nil {
		t.Error("no conflict between bf16 and fp32")
	}
	mesh.WirePrecision = "" // persisted by an older build: fp32
	mine.WirePrecision = "fp32"
	if err := mine.CheckAdopt(mesh, func(f string) bool { return f == "wire-precision" }); err != nil {
		t.Errorf("fp32 against an unset precision: %v", err)
	}
}

func TestSpecPipeline(t *testing.T) {
	s := DefaultSpec() // dssp:3:12
	if s.Pipeline {
		t.Fatal("pipelining is on by default")
	}
	s.Pipeline = true
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		paradigm string
		sl, rmax int64
	}{{"bsp", 0, 0}, {"asp", 0, 0}, {"ssp", 0, 0}, {"dssp", 0, 4}, {"dssp-paper", 3, 12}} {
		s.Paradigm, s.SLower, s.RMax = p.paradigm, p.sl, p.rmax
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "--pipeline") {
			t.Errorf("%s with --pipeline: %v, want an error naming the flag", s.PolicyText(), err)
		}
	}
	// A spec persisted before the fields existed reads as off, and as the
	// whole batch ahead had it been on.
	before := DefaultSpec()
	before.PipelineFresh = 0
	old := must(Marshal(before))
	got, err := Unmarshal(old)
	if err != nil || got.Pipeline || got.PipelineFresh != 0 || strings.Contains(string(old), "pipeline") {
		t.Fatalf("old spec: %+v, %v", got, err)
	}
	for _, f := range []float64{-0.1, 1, 1.5, math.NaN()} {
		s := DefaultSpec()
		s.Pipeline, s.Paradigm, s.SLower, s.PipelineFresh = true, "ssp", 1, f
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "--pipeline-fresh") {
			t.Errorf("--pipeline-fresh %v: %v, want an error naming the flag", f, err)
		}
	}
	s = DefaultSpec()
	s.Pipeline = true
	back, err := Unmarshal(must(Marshal(s)))
	if err != nil || !back.Pipeline {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// --shards 0 resolves to one shard per AutoShardBytes of fp32 parameters
// when the first node writes the spec; a count given stays.
func TestWithShards(t *testing.T) {
	for _, c := range []struct{ shards, params, want int }{
		{0, 0, 1},
		{0, 235146, 1}, // the MLP
		{0, AutoShardBytes / 4, 1},
		{0, AutoShardBytes/4 + 1, 2},
		{0, 24_900_000, 6}, // mlp-wide's ~99.6 MB
		{0, 1 << 40, maxShards},
		{4, 235146, 4},
	} {
		s := DefaultSpec()
		s.Shards = c.shards
		if got := s.WithShards(c.params).Shards; got != c.want {
			t.Errorf("--shards %d, %d parameters: %d shards, want %d", c.shards, c.params, got, c.want)
		}
	}
	s, err := ResolveShards(DefaultSpec())
	if err != nil || s.Shards != 1 || s.Validate() != nil {
		t.Fatalf("the default job resolves to %d shards, %v", s.Shards, err)
	}
}

// An even replication survives no more failures than the odd one below it
// (2: none); it is refused by name with the reason, and 1 is accepted with
// a warning.
func TestReplicationMustBeOdd(t *testing.T) {
	for _, tc := range []struct {
		r    int
		want string // "" accepted
	}{
		{1, ""}, {3, ""}, {5, ""}, {7, ""},
		{2, "--replication 2 is even: a shard's 2 voters need both for a quorum, so one kill freezes the shard"},
		{4, "--replication 4 is even: a shard's 4 voters need 3 for a quorum, so it survives 1 failure(s), no more than 3 voters do; use 3 or 5"},
		{6, "--replication 6 is even: a shard's 6 voters need 4 for a quorum, so it survives 2 failure(s), no more than 5 voters do; use 5 or 7"},
		{0, "--replication 0 outside 1..7"},
		{9, "--replication 9 outside 1..7"},
	} {
		s := DefaultSpec()
		s.Replication = tc.r
		err := s.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("--replication %d: %v", tc.r, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("--replication %d: %v, want %q", tc.r, err, tc.want)
		}
		if warn := s.ReplicationWarning(); (tc.r == 1) != (warn != "") {
			t.Errorf("--replication %d: warning %q", tc.r, warn)
		}
	}
	// A persisted or served spec is validated on the way in too.
	s := DefaultSpec()
	s.Replication = 2
	b, err := Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Unmarshal(b); err == nil || !strings.Contains(err.Error(), "--replication 2 is even") {
		t.Errorf("Unmarshal of replication 2: %v", err)
	}
}

// TestSpecMomentumFloat32 refuses, in dssp node's job spec as in dssp
// train, a momentum below 1 in float64 that float32 rounds to 1.
func TestSpecMomentumFloat32(t *testing.T) {
	s := DefaultSpec()
	s.Optimizer = "momentum"
	for _, m := range []float64{0.99999999999, 1, math.NaN(), -0.1} {
		s.Momentum = m
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "--momentum") {
			t.Errorf("--momentum %v: %v, want an error naming the flag", m, err)
		}
	}
	s.Momentum = 0.99999999999
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "rounds to 1 in float32") {
		t.Errorf("--momentum 0.99999999999: %v, want it refused as rounding to 1", err)
	}
	s.Momentum = 0.99999994 // the largest float32 below 1
	if err := s.Validate(); err != nil {
		t.Errorf("--momentum 0.99999994: %v", err)
	}
}

// TestWithJobDataset: a new external job started without --dataset names
// its dataset "external" (the mesh does not know the trainers' data); an
// explicit --dataset is kept, and a built-in model's default is its own.
func TestWithJobDataset(t *testing.T) {
	none := func(string) bool { return false }
	given := func(f string) bool { return f == "dataset" }
	ext := DefaultSpec()
	ext.Model = ExternalModel
	if got := ext.WithJobDataset(none).Dataset; got != ExternalDataset {
		t.Errorf("external job without --dataset: dataset %q, want %q", got, ExternalDataset)
	}
	ext.Dataset = "goroot-src"
	if got := ext.WithJobDataset(given).Dataset; got != "goroot-src" {
		t.Errorf("external job with --dataset goroot-src: dataset %q", got)
	}
	if got := DefaultSpec().WithJobDataset(none).Dataset; got != "mnist" {
		t.Errorf("built-in mlp without --dataset: dataset %q, want mnist", got)
	}
	if err := ext.WithJobDataset(none).Validate(); err != nil {
		t.Errorf("external job named %q does not validate: %v", ExternalDataset, err)
	}
}

// TestLocalStepsAuto: --local-steps takes a number, auto (bound 64) or
// auto:N; a bad value, a bound below 2 and auto with --balance are
// refused by name; the flag's text is what a joiner is compared on.
func TestLocalStepsAuto(t *testing.T) {
	for _, c := range []struct {
		in, text string
		auto     bool
		h        int
	}{{"16", "16", false, 16}, {"auto", "auto:64", true, DefaultAutoSteps}, {"auto:32", "auto:32", true, 32}} {
		s := DefaultSpec()
		if err := (localStepsFlag{&s.RoundFlags}).Set(c.in); err != nil || s.LocalStepsAuto != c.auto || s.LocalSteps != c.h {
			t.Fatalf("--local-steps %s: auto %v H %d, %v", c.in, s.LocalStepsAuto, s.LocalSteps, err)
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("--local-steps %s: %v", c.in, err)
		}
		if got := (localStepsFlag{&s.RoundFlags}).String(); got != c.text {
			t.Fatalf("--local-steps %s reads back as %q", c.in, got)
		}
	}
	s := DefaultSpec()
	for _, bad := range []string{"automatic", "auto:x", "x"} {
		if err := (localStepsFlag{&s.RoundFlags}).Set(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Fatalf("--local-steps %s: %v", bad, err)
		}
	}
	(localStepsFlag{&s.RoundFlags}).Set("auto:1")
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "auto:1") {
		t.Fatalf("auto:1: %v", err)
	}
	(localStepsFlag{&s.RoundFlags}).Set("auto")
	s.Balance = true
	if err := s.Validate(); err != nil {
		t.Fatalf("auto with --balance: %v", err)
	}
	if s.BalanceStep() != int64(s.BatchSize) || s.BalanceBase() != int64(s.BatchSize)*DefaultAutoSteps {
		t.Fatalf("auto with --balance: step %d, base %d; want the batch %d and the round at the bound", s.BalanceStep(), s.BalanceBase(), s.BatchSize)
	}
	s.BatchSize = 4
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "--batch 4") {
		t.Fatalf("auto with --balance and --batch 4: %v", err)
	}
}
