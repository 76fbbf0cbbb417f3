package bench

import (
	"strings"
	"testing"
	"time"

	"dsspmesh/lab/netlab"
)

// TestLinkSettingsRoundTrip: --link makes each setting an unshaped
// baseline and a shaped run measured against it, run one after the other;
// the report sets them side by side, and a rendered report keeps both
// settings' links and the measured paths.
func TestLinkSettingsRoundTrip(t *testing.T) {
	spec := netlab.Presets["two-sites"]
	cfg := DefaultParadigmsConfig()
	cfg.Binary, cfg.OutDir, cfg.Repeats = "dssp", t.TempDir(), 1
	cfg.Variants = []Variant{"dssp:3:12", "dssp:3:12+h16"}
	cfg.Targets, cfg.RefTarget = []float64{0.97}, 0.97
	cfg.Settings = LinkSettings([]Setting{{Name: "homogeneous"}}, spec)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	order := runOrder(cfg.Settings)
	if len(order) != 1 || len(order[0]) != 2 || order[0][0].Name != "homogeneous-unshaped" || order[0][1].Baseline != "homogeneous-unshaped" {
		t.Fatalf("run order %+v", order)
	}
	if order[0][0].Link.Shaped() || !order[0][1].Link.Shaped() {
		t.Fatalf("baseline shaped %v, run shaped %v", order[0][0].Link.Shaped(), order[0][1].Link.Shaped())
	}
	bad := cfg
	bad.Workers = 3
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "4 hosts") {
		t.Errorf("3 workers on 4 hosts: %v", err)
	}
	res := &ParadigmsResult{Config: cfg, Paths: []string{"between sites: RTT 50.8 ms"}}
	for _, set := range cfg.Settings {
		for _, v := range cfg.Variants {
			sps, to := 4000.0, 30*time.Second
			if set.Baseline != "" {
				sps, to = 1000, 60*time.Second
			}
			res.Runs = append(res.Runs, RunSummary{Setting: set.Name, Variant: v, Repeat: 1, Limit: cfg.TimeLimit,
				ToTarget: []time.Duration{to}, SamplesTo: []float64{1e5}, SamplesPerSec: sps, BytesPerSample: 7000, Wait: []float64{0.5, 0.5, 0.5, 0.5}, FinalAcc: 0.97})
		}
	}
	md := res.Markdown()
	for _, want := range []string{"homogeneous-shaped against homogeneous-unshaped", "| dssp:3:12+h16 | 1000, 4000 | 0.25 |", "60.0s, 30.0s | 2.00 |", "RTT 50.8 ms"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if err := res.Write(cfg.OutDir); err != nil {
		t.Fatal(err)
	}
	got, err := LoadParadigms(cfg.OutDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Config.Settings) != 2 || got.Config.Settings[1].Link == nil || *got.Config.Settings[1].Link != spec ||
		got.Config.Settings[1].Baseline != "homogeneous-unshaped" || got.Config.Settings[0].Link == nil || got.Config.Settings[0].Link.Shaped() {
		t.Errorf("rendered settings %+v", got.Config.Settings)
	}
	if len(got.Paths) != 1 || got.Markdown() != md {
		t.Errorf("rendered report differs:\n%s\nwant\n%s", got.Markdown(), md)
	}
}
