package bench

import (
	"slices"
	"strings"
	"testing"
	"time"

	"dsspmesh/node/launch"
	"dsspmesh/node/records"
)

func TestTimesToTargets(t *testing.T) {
	evals := []launch.EvalPoint{{Elapsed: 5 * time.Second, Accuracy: 0.8}, {Elapsed: 10 * time.Second, Accuracy: 0.96}, {Elapsed: 15 * time.Second, Accuracy: 0.94}}
	got := TimesToTargets(evals, []float64{0.9, 0.95, 0.97})
	want := []time.Duration{10 * time.Second, 10 * time.Second, NotReached}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("target %d: %v, want %v", i, got[i], want[i])
		}
	}
}

func TestMedianDurationCountsMissesAsInfinite(t *testing.T) {
	s := time.Second
	cases := []struct {
		in   []time.Duration
		want time.Duration
	}{
		{[]time.Duration{3 * s, NotReached, 1 * s}, 3 * s},
		{[]time.Duration{NotReached, NotReached, 1 * s}, NotReached},
		{[]time.Duration{2 * s, 4 * s}, 3 * s},
		{[]time.Duration{2 * s, NotReached}, NotReached},
		{nil, NotReached},
	}
	for _, c := range cases {
		if got := MedianDuration(c.in); got != c.want {
			t.Errorf("MedianDuration(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestRatio(t *testing.T) {
	s := time.Second
	if got := Ratio(30*s, 15*s, 90*s); got != "2.00" {
		t.Errorf("reached both: %q", got)
	}
	if got := Ratio(NotReached, 30*s, 90*s); got != "> 3.00" {
		t.Errorf("only the reference reached: %q", got)
	}
	if got := Ratio(30*s, NotReached, 90*s); got != "—" {
		t.Errorf("reference not reached: %q", got)
	}
}

// TestRatesSkipStartup: the rate runs from the first poll at which every
// worker has an iteration, and the wait share is each node's last.
func TestRatesSkipStartup(t *testing.T) {
	var samples []launch.Sample
	add := func(at int, iters ...uint64) {
		for n, it := range iters {
			samples = append(samples, launch.Sample{Elapsed: time.Duration(at) * time.Second, Node: n, Up: true,
				Worker: records.LocalWorker{Iter: it, ComputeSeconds: 1, WaitSeconds: float64(n)}})
		}
	}
	add(1, 0, 0)
	add(2, 5, 0)
	add(3, 10, 2)
	add(5, 30, 12)
	ips, wait := rates(samples)
	if want := (42.0 - 12) / 2; ips != want {
		t.Errorf("iters/s %v, want %v", ips, want)
	}
	if wait[0] != 0 || wait[1] != 0.5 {
		t.Errorf("wait shares %v, want [0 0.5]", wait)
	}
}

func TestMarkdownShowsMissesAndRatios(t *testing.T) {
	cfg := DefaultParadigmsConfig()
	cfg.Binary, cfg.Repeats, cfg.TimeLimit = "dssp", 1, 90*time.Second
	cfg.Variants = []Variant{"bsp", "dssp:3:12"}
	cfg.Settings = cfg.Settings[:1]
	s := time.Second
	r := &ParadigmsResult{Config: cfg, Runs: []RunSummary{
		{Setting: "homogeneous", Variant: "bsp", Limit: cfg.TimeLimit, ToTarget: []time.Duration{40 * s, NotReached, NotReached}, Wait: []float64{0.5, 0.6}},
		{Setting: "homogeneous", Variant: "dssp:3:12", Limit: cfg.TimeLimit, ToTarget: []time.Duration{20 * s, 30 * s, NotReached}},
	}}
	md := r.Markdown()
	for _, want := range []string{"not reached in 1m30s", "> 3.00", "| 1.00 |", "50% 60%", "t97% ÷ t(dssp:3:12)"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

func TestConfigValidateNamesBadValue(t *testing.T) {
	cfg := DefaultParadigmsConfig()
	cfg.Binary = "dssp"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := cfg
	bad.Variants = []Variant{"ssp:x"}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "ssp:x") {
		t.Errorf("bad paradigm: %v", err)
	}
	bad = cfg
	bad.RefTarget = 0.99
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "0.99") {
		t.Errorf("ref target not in targets: %v", err)
	}
	bad = cfg
	bad.Settings = []Setting{{Name: "h", Slowdown: []float64{0.5}}}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "0.5") {
		t.Errorf("slowdown below 1: %v", err)
	}
}

func TestPrefixWriterKeepsHeadlines(t *testing.T) {
	var b strings.Builder
	w := &prefixWriter{w: &b, prefix: "[x] "}
	w.Write([]byte("12s  test accuracy 80%\n  node0 ...\n"))
	w.Write([]byte("reached 90%"))
	w.Write([]byte(" after 3s\n"))
	want := "[x] 12s  test accuracy 80%\n[x] reached 90% after 3s\n"
	if b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}

func TestGateCostsEveryPolicy(t *testing.T) {
	costs, err := MeasureGate([]string{"bsp", "dssp:3:12", "dssp-paper:3:12"}, 4, 20000, []float64{1, 1, 2, 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(costs) != 4 || costs[0].Policy != "asp" || costs[0].Held != 0 {
		t.Fatalf("costs %+v", costs)
	}
	for _, c := range costs[1:] {
		if c.Held == 0 {
			t.Errorf("%s held no push with a 4x straggler", c.Policy)
		}
	}
	if costs[2].Controls == 0 {
		t.Errorf("dssp never ran its controller")
	}
}

func TestLoadParadigmsRoundTrip(t *testing.T) {
	cfg := DefaultParadigmsConfig()
	cfg.Binary, cfg.Repeats, cfg.TimeLimit, cfg.OutDir = "dssp", 1, 90*time.Second, t.TempDir()
	cfg.Variants = []Variant{"bsp", "dssp:3:12"}
	s := time.Second
	r := &ParadigmsResult{Config: cfg, Runs: []RunSummary{
		{Setting: "homogeneous", Variant: "bsp", Repeat: 1, Limit: cfg.TimeLimit, ToTarget: []time.Duration{40 * s, NotReached, NotReached},
			Wait: []float64{0.5, 0.6, 0.5, 0.5}, FinalAcc: 0.96, ItersPerSec: 12.5},
		{Setting: "heterogeneous", Variant: "dssp:3:12", Repeat: 1, Limit: cfg.TimeLimit, ToTarget: []time.Duration{20 * s, 30 * s, NotReached},
			SamplesTo: []float64{120000, 180000, 0}, Wait: []float64{0.1, 0.2, 0.3, 0.4}, FinalAcc: 0.965, ItersPerSec: 10},
	}}
	if err := r.Write(cfg.OutDir); err != nil {
		t.Fatal(err)
	}
	back, err := LoadParadigms(cfg.OutDir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := back.Markdown(), r.Markdown(); got != want {
		t.Errorf("re-rendered report differs:\n%s\nwant:\n%s", got, want)
	}
	if !strings.Contains(r.Markdown(), "| 180k |") {
		t.Errorf("the throughput table does not show the samples to the reference target (180k):\n%s", r.Markdown())
	}
}

func TestBalancedVariantSetsTheJobFlag(t *testing.T) {
	args, err := Variant("ssp:1+balance").specArgs()
	if err != nil || !slices.Equal(args, []string{"--paradigm", "ssp", "--balance=true", "--s-lower", "1"}) {
		t.Fatalf("ssp:1+balance: %v %v", args, err)
	}
	if args, _ := Variant("bsp").specArgs(); slices.Contains(args, "--balance=true") || Variant("bsp").Balanced() {
		t.Fatalf("bsp: %v", args)
	}
	if _, err := Variant("bogus+balance").specArgs(); err == nil {
		t.Fatal("a bad policy with +balance accepted")
	}
	args, err = Variant("ssp:1+balance+pipeline").specArgs()
	if err != nil || !slices.Equal(args, []string{"--paradigm", "ssp", "--balance=true", "--pipeline=true", "--s-lower", "1"}) {
		t.Fatalf("ssp:1+balance+pipeline: %v %v", args, err)
	}
	for _, bad := range []Variant{"bsp+pipeline", "ssp:1+fast"} {
		if _, err := bad.specArgs(); err == nil {
			t.Fatalf("%s accepted", bad)
		}
	}
	cells := []Cell{{Variant: "bsp"}, {Variant: "asp"}, {Variant: "dssp:3:12"}, {Variant: "ssp:1+balance"}}
	var refs []Variant
	for _, c := range refCells(cells) {
		refs = append(refs, c.Variant)
	}
	if !slices.Equal(refs, []Variant{"bsp", "asp", "dssp:3:12"}) {
		t.Fatalf("references with a balanced variant: %v", refs)
	}
}
