package sim

import (
	"strings"
	"testing"
	"time"

	"dsspmesh/clock"
)

func heteroConfig(dist Dist, speeds ...float64) Config {
	c := DefaultConfig()
	c.Workers, c.Iters, c.Models = len(speeds), 2000, nil
	for _, s := range speeds {
		c.Models = append(c.Models, Model{Dist: dist, Mean: 100 * time.Millisecond, Spread: 0.1, Slowdown: s})
	}
	return c
}

func run(t *testing.T, c Config, policy string) Result {
	t.Helper()
	p, err := clock.ParsePolicy(policy)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Run(c, p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRunIsDeterministic(t *testing.T) {
	c := heteroConfig(LogNormal, 1, 2, 3)
	c.Latency = time.Millisecond
	c.Models[0].StragglerProb, c.Models[0].StragglerFactor, c.Models[0].StragglerIters = 0.01, 5, 3
	if a, b := run(t, c, "dssp:2:6"), run(t, c, "dssp:2:6"); a != b {
		t.Fatalf("two runs differ:\n%+v\n%+v", a, b)
	}
}

func TestBoundedParadigmsKeepGapAndPersistentStragglerSetsThePace(t *testing.T) {
	c := heteroConfig(Fixed, 1, 1, 1, 4)
	bsp, asp := run(t, c, "bsp"), run(t, c, "asp")
	// 3 workers at 10 it/s and one at 2.5: ASP 32.5 it/s, BSP 4 × 2.5 = 10.
	if asp.ItersPerSec < 3*bsp.ItersPerSec {
		t.Fatalf("asp %.1f it/s not above 3× bsp %.1f", asp.ItersPerSec, bsp.ItersPerSec)
	}
	for _, policy := range []string{"ssp:3", "dssp:3:12", "dssp:3:12:wait"} {
		r := run(t, c, policy)
		if r.MaxGap > r.Policy.SU() {
			t.Errorf("%s: max gap %d > s_U", policy, r.MaxGap)
		}
		if r.ItersPerSec > 1.05*bsp.ItersPerSec {
			t.Errorf("%s: %.2f it/s beats the straggler's pace %.2f", policy, r.ItersPerSec, bsp.ItersPerSec)
		}
	}
	// With exact timings the literal Algorithm 1 keeps granting: near ASP.
	if paper := run(t, c, "dssp-paper:3:12"); paper.ItersPerSec < 0.95*asp.ItersPerSec {
		t.Errorf("dssp-paper %.2f it/s, want near asp %.2f", paper.ItersPerSec, asp.ItersPerSec)
	}
}

func TestConfigValidateNamesTheValue(t *testing.T) {
	for _, c := range []struct {
		mut  func(*Config)
		want string
	}{
		{func(c *Config) { c.Workers = 0 }, "workers 0"},
		{func(c *Config) { c.Iters = -3 }, "iters -3"},
		{func(c *Config) { c.Models[0].Slowdown = -2 }, "-2"},
		{func(c *Config) { c.Models[0].Spread = 1.5 }, "1.5"},
		{func(c *Config) { c.Models[0].StragglerProb = 2 }, "probability 2"},
	} {
		cfg := DefaultConfig()
		cfg.Models = []Model{cfg.Models[0]}
		c.mut(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate: %v, want it to name %q", err, c.want)
		}
	}
}

func TestWorkerIndexInvertsWorkerID(t *testing.T) {
	for _, i := range []int{0, 7, 99999, 100000, 1234567} {
		if got := workerIndex(workerID(i)); got != i {
			t.Errorf("workerIndex(%q) = %d, want %d", workerID(i), got, i)
		}
	}
}
